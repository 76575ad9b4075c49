// The processes of one run. A plain `cnnrun ...` is one rank. `mpirun -np N cnnrun ...` is N
// ranks (through MPI, when this build has it): each runs a contiguous shard of the images on its
// own GPU or cores, and they meet only to agree that every rank got through a step and to
// combine their results, so what crosses between them is a few bytes per image (the
// predictions; the output values only for --dump or --predictions). docs/mpi.md says how to run it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/error.h"

namespace cnnrun {

// Rank `rank`'s images of `total`: contiguous, in rank order, never overlapping, covering all of
// them; the sizes differ by at most one (the first total % ranks ranks take one more).
struct Shard {
  int64_t first = 0, count = 0;
};
Shard shard_of(int64_t total, int rank, int ranks);

class Ranks {
 public:
  virtual ~Ranks() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // This rank among the ranks on its machine: it picks the GPU.
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  virtual std::string host() const = 0;

  // Collective (every rank calls it at the same step): each rank gives its error, "" for none.
  // Returns "" when no rank failed, else the lowest failing rank's error, the same on every
  // rank, as "rank R of N (HOST): message".
  virtual std::string first_error(const std::string& mine) = 0;
  // Collective: element-wise sums and maxima over the ranks, in place, the result on every rank.
  virtual void sum(std::vector<int64_t>& v) = 0;
  virtual void max(std::vector<double>& v) = 0;
  // Collective: rank 0 receives every rank's bytes in rank order (its own first); the other
  // ranks receive nothing. Any size (sent in pieces below MPI's 2 GiB count limit).
  virtual std::vector<std::string> gather(const std::string& mine) = 0;
};

// One rank: the plain run.
std::unique_ptr<Ranks> single_rank();

// The ranks this process belongs to: MPI's when the build has MPI and a launcher (mpirun or
// srun: OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_SIZE in the environment) started it, MPI being
// initialised here and finalised when the object goes; otherwise one rank. Throws when a
// launcher started several ranks and this build has no MPI: each would run the whole job.
std::unique_ptr<Ranks> make_ranks(int* argc, char*** argv);
bool mpi_built();  // whether this build has MPI

// An error every rank has agreed on (Ranks::first_error): printed once, by rank 0.
class RanksFailed : public Error {
 public:
  using Error::Error;
};

}  // namespace cnnrun
