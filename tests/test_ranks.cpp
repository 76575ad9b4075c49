// MPI ranks without MPI: the shards every rank computes for itself, the one-rank case, and the
// CPU reference's promise that an image's result does not depend on the images run beside it
// (ranks cut the run into other blocks, and must give the bits one process gives).
#include <cstring>

#include "engine/dist/ranks.h"
#include "engine/network.h"
#include "reference/cpu_executor.h"
#include "tests/test_util.h"

using namespace cnnrun;

TEST_CASE("ranks: shards are contiguous, in rank order, cover the run and differ by at most one") {
  for (int64_t total = 0; total <= 41; ++total)
    for (int ranks = 1; ranks <= 7; ++ranks) {
      CAPTURE(total);
      CAPTURE(ranks);
      int64_t next = 0, lo = total, hi = 0;
      for (int r = 0; r < ranks; ++r) {
        Shard s = shard_of(total, r, ranks);
        CHECK(s.first == next);
        next = s.first + s.count;
        lo = std::min(lo, s.count);
        hi = std::max(hi, s.count);
      }
      CHECK(next == total);
      CHECK(hi - lo <= 1);
    }
  CHECK(shard_of(10, 2, 3).first == 7);  // 4, 3, 3
  CHECK(shard_of(10, 2, 3).count == 3);
  CHECK_THROWS_AS(shard_of(10, 3, 3), Error);
}

TEST_CASE("ranks: a plain run is one rank, and its collectives are the identity") {
  auto r = single_rank();
  CHECK(r->rank() == 0);
  CHECK(r->size() == 1);
  CHECK(r->local_rank() == 0);
  CHECK(r->first_error("") == "");
  CHECK(r->first_error("boom") == "boom");
  std::vector<int64_t> v = {1, 2};
  r->sum(v);
  CHECK(v == std::vector<int64_t>{1, 2});
  CHECK(r->gather("abc") == std::vector<std::string>{"abc"});
}

TEST_CASE("cpu reference: an image's outputs are the same bits in whatever block it runs") {
  // fc layers of several shapes (the GEMM whose rows once depended on the block), over
  // convolutions, pooling and batchnorm.
  Network net = parse_netdef_string(
      "input: {channels: 3, height: 9, width: 7}\n"
      "classes: 37\n"
      "layers:\n"
      "  - {name: conv1, type: conv, filters: 5, kernel: 3, pad: 1}\n"
      "  - {name: bn1, type: batchnorm}\n"
      "  - {name: relu1, type: relu}\n"
      "  - {name: pool1, type: maxpool, size: 2}\n"
      "  - {name: fc1, type: fc, outputs: 131}\n"
      "  - {name: relu2, type: relu}\n"
      "  - {name: fc2, type: fc, outputs: 37}\n"
      "  - {name: prob, type: softmax}\n",
      "invariance");
  test::uniform_weights(net, 7, 0.1f, 0.9f);
  Dataset data;
  data.count = 150;
  data.shape = net.input;
  for (float v : test::random_floats(static_cast<size_t>(150 * net.input.size()), 3, 0.f, 255.99f))
    data.pixels.push_back(static_cast<uint8_t>(v));
  auto ex = make_cpu_executor(net);
  RunOptions opt;
  opt.batch = 150;
  opt.want_probs = true;
  opt.block = 150;
  const RunResult whole = ex->run(data, opt);
  for (int64_t block : {1, 3, 17, 64, 65, 100}) {
    CAPTURE(block);
    opt.block = block;
    const RunResult r = ex->run(data, opt);
    REQUIRE(r.probs.size() == whole.probs.size());
    CHECK(std::memcmp(r.probs.data(), whole.probs.data(), r.probs.size() * sizeof(float)) == 0);
  }
  // forward_layers on a range: every layer's output, the same bits as inside the whole block.
  const std::vector<Tensor> all = ex->forward_layers(data, 0, 150, opt),
                            part = ex->forward_layers(data, 61, 5, opt);
  for (size_t i = 0; i < all.size(); ++i) {
    CAPTURE(i);
    const int64_t per = all[i].numel() / 150;
    REQUIRE(part[i].numel() == 5 * per);
    CHECK(std::memcmp(part[i].ptr(), all[i].ptr() + 61 * per, static_cast<size_t>(5 * per) * sizeof(float)) ==
          0);
  }
}
