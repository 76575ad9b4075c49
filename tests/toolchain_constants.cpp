// Two functions and nothing else: the pattern GCC 12.2 compiled wrongly with -mavx512f (see
// tests/test_toolchain.cpp). Kept alone in its file, as the miscompilation needs.
#include <cstdint>
#include <vector>

namespace cnnrun::test {

void toolchain_take(std::vector<int64_t>* into, const std::vector<int64_t>& v);
void toolchain_ones(std::vector<int64_t>* out) { toolchain_take(out, {1, 1, 1, 1}); }
void toolchain_two_ones(std::vector<int64_t>* out) { toolchain_take(out, {1, 1, 0, 0}); }

}  // namespace cnnrun::test
