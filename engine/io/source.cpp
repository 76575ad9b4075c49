// In-memory data sets as sources: run whole, or read in blocks by copying their slices.
#include "engine/io/source.h"

#include <algorithm>

#include "engine/core/error.h"

namespace cnnrun {

namespace {

class MemorySource : public DataSource {
 public:
  explicit MemorySource(Dataset d) : d_(std::move(d)) {}
  int64_t count() const override { return d_.count; }
  Shape shape() const override { return d_.shape; }
  bool labelled() const override { return d_.labelled(); }
  std::string description() const override { return d_.description; }
  const Dataset* whole() const override { return &d_; }
  void read(int64_t first, int64_t n, Dataset& out) override {
    if (first < 0 || n < 0 || first + n > d_.count) throw Error("block outside the data set");
    const size_t per = static_cast<size_t>(d_.shape.size()), a = static_cast<size_t>(first),
                 b = static_cast<size_t>(first + n);
    out.count = n;
    out.shape = d_.shape;
    out.description = d_.description;
    out.pixels.assign(d_.pixels.begin() + static_cast<std::ptrdiff_t>(std::min(a * per, d_.pixels.size())),
                      d_.pixels.begin() + static_cast<std::ptrdiff_t>(std::min(b * per, d_.pixels.size())));
    out.values.assign(d_.values.begin() + static_cast<std::ptrdiff_t>(std::min(a * per, d_.values.size())),
                      d_.values.begin() + static_cast<std::ptrdiff_t>(std::min(b * per, d_.values.size())));
    out.labels.assign(d_.labels.begin() + static_cast<std::ptrdiff_t>(std::min(a, d_.labels.size())),
                      d_.labels.begin() + static_cast<std::ptrdiff_t>(std::min(b, d_.labels.size())));
    out.paths.assign(d_.paths.begin() + static_cast<std::ptrdiff_t>(std::min(a, d_.paths.size())),
                     d_.paths.begin() + static_cast<std::ptrdiff_t>(std::min(b, d_.paths.size())));
  }

 private:
  Dataset d_;
};

}  // namespace

std::unique_ptr<DataSource> memory_source(Dataset data) {
  return std::make_unique<MemorySource>(std::move(data));
}

}  // namespace cnnrun
