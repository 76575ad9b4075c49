// Ranks without MPI (the build found none): every run is one rank, and a launcher's several
// ranks are refused rather than each running the whole job.
#include <cstdlib>
#include <string>

#include "engine/dist/ranks.h"

namespace cnnrun {

bool mpi_built() { return false; }

std::unique_ptr<Ranks> make_ranks(int*, char***) {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char* v = std::getenv(var))
      if (std::atoi(v) > 1)
        throw Error(
            std::string("started as one of ") + v +
            " MPI ranks, but this cnnrun was built without MPI, so each rank would run the whole job; "
            "install Open MPI (libopenmpi-dev) and build again, or run it without mpirun");
  return single_rank();
}

}  // namespace cnnrun
