// Ranks through MPI (Open MPI from Debian's libopenmpi-dev, or any MPI-3 library): collectives
// on MPI_COMM_WORLD, called from the main thread only (MPI_THREAD_FUNNELED; decoding and CPU
// workers never call MPI).
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>

#include "engine/dist/ranks.h"

namespace cnnrun {

namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(std::string("MPI: ") + what + ": " + std::string(text, static_cast<size_t>(len)));
}

// Bytes per message: below MPI's int count limit.
constexpr int64_t kPiece = int64_t{1} << 30;

class MpiRanks : public Ranks {
 public:
  MpiRanks(int* argc, char*** argv) {
    int provided = 0;
    check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    // Errors come back as codes (turned into exceptions), not as an abort inside MPI.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
    MPI_Comm node;
    check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node),
          "MPI_Comm_split_type");
    MPI_Comm_rank(node, &local_rank_);
    MPI_Comm_size(node, &local_size_);
    MPI_Comm_free(&node);
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    int len = 0;
    MPI_Get_processor_name(name, &len);
    host_.assign(name, static_cast<size_t>(len));
  }
  ~MpiRanks() override { MPI_Finalize(); }
  MpiRanks(const MpiRanks&) = delete;
  MpiRanks& operator=(const MpiRanks&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  std::string host() const override { return host_; }

  std::string first_error(const std::string& mine) override {
    int failed = mine.empty() ? size_ : rank_, lowest = size_;
    check(MPI_Allreduce(&failed, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
    if (lowest == size_) return "";
    std::string msg = rank_ == lowest ? "rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                                            " (" + host_ + "): " + mine.substr(0, 4096)
                                      : std::string();
    int len = static_cast<int>(msg.size());
    check(MPI_Bcast(&len, 1, MPI_INT, lowest, MPI_COMM_WORLD), "MPI_Bcast");
    msg.resize(static_cast<size_t>(len));
    check(MPI_Bcast(msg.data(), len, MPI_CHAR, lowest, MPI_COMM_WORLD), "MPI_Bcast");
    return msg;
  }

  void sum(std::vector<int64_t>& v) override {
    check(MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_INT64_T, MPI_SUM,
                        MPI_COMM_WORLD),
          "MPI_Allreduce");
  }
  void max(std::vector<double>& v) override {
    check(MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_MAX,
                        MPI_COMM_WORLD),
          "MPI_Allreduce");
  }

  std::vector<std::string> gather(const std::string& mine) override {
    constexpr int kTag = 17;
    if (rank_ != 0) {
      int64_t n = static_cast<int64_t>(mine.size());
      check(MPI_Send(&n, 1, MPI_INT64_T, 0, kTag, MPI_COMM_WORLD), "MPI_Send");
      for (int64_t at = 0; at < n; at += kPiece)
        check(MPI_Send(mine.data() + at, static_cast<int>(std::min(kPiece, n - at)), MPI_CHAR, 0, kTag,
                       MPI_COMM_WORLD),
              "MPI_Send");
      return {};
    }
    std::vector<std::string> all(static_cast<size_t>(size_));
    all[0] = mine;
    for (int r = 1; r < size_; ++r) {
      int64_t n = 0;
      check(MPI_Recv(&n, 1, MPI_INT64_T, r, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
      std::string& s = all[static_cast<size_t>(r)];
      s.resize(static_cast<size_t>(n));
      for (int64_t at = 0; at < n; at += kPiece)
        check(MPI_Recv(s.data() + at, static_cast<int>(std::min(kPiece, n - at)), MPI_CHAR, r, kTag,
                       MPI_COMM_WORLD, MPI_STATUS_IGNORE),
              "MPI_Recv");
    }
    return all;
  }

 private:
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string host_;
};

// A launcher's environment: Open MPI's mpirun, PMIx (srun, prterun), or PMI (MPICH's hydra).
bool launched() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (std::getenv(var)) return true;
  return false;
}

}  // namespace

bool mpi_built() { return true; }

std::unique_ptr<Ranks> make_ranks(int* argc, char*** argv) {
  if (!launched()) return single_rank();
  return std::make_unique<MpiRanks>(argc, argv);
}

}  // namespace cnnrun
