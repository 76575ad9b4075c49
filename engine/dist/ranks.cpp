// Shards and the one-rank case; ranks_mpi.cpp (or ranks_none.cpp) makes the ranks of a run.
#include "engine/dist/ranks.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>

namespace cnnrun {

Shard shard_of(int64_t total, int rank, int ranks) {
  if (ranks < 1 || rank < 0 || rank >= ranks || total < 0) throw Error("shard_of: bad rank or total");
  const int64_t base = total / ranks, extra = total % ranks;
  Shard s;
  s.first = rank * base + std::min<int64_t>(rank, extra);
  s.count = base + (rank < extra ? 1 : 0);
  return s;
}

namespace {

class SingleRank : public Ranks {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  std::string host() const override {
    char h[HOST_NAME_MAX + 1] = {};
    return ::gethostname(h, sizeof h - 1) == 0 ? std::string(h) : std::string("?");
  }
  std::string first_error(const std::string& mine) override { return mine; }
  void sum(std::vector<int64_t>&) override {}
  void max(std::vector<double>&) override {}
  std::vector<std::string> gather(const std::string& mine) override { return {mine}; }
};

}  // namespace

std::unique_ptr<Ranks> single_rank() { return std::make_unique<SingleRank>(); }

}  // namespace cnnrun
