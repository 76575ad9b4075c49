// The compiler builds what the source says. GCC 12.2 with -mavx512f (-march=native on an AVX-512
// machine) gave toolchain_two_ones() the constant of toolchain_ones() in the same file, {1,1,1,1}
// for {1,1,0,0}: CMakeLists.txt turns AVX-512 off for GCC < 13, and this case fails if it ever
// comes back (tests/toolchain_constants.cpp holds the two functions, alone, as the bug needs).
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

namespace cnnrun::test {

void toolchain_ones(std::vector<int64_t>* out);
void toolchain_two_ones(std::vector<int64_t>* out);
void toolchain_take(std::vector<int64_t>* into, const std::vector<int64_t>& v) { *into = v; }

}  // namespace cnnrun::test

TEST_CASE("toolchain: vector constants of two functions in one file stay apart") {
  std::vector<int64_t> a, b;
  cnnrun::test::toolchain_ones(&a);
  cnnrun::test::toolchain_two_ones(&b);
  CHECK(a == std::vector<int64_t>{1, 1, 1, 1});
  CHECK(b == std::vector<int64_t>{1, 1, 0, 0});
}
