#!/usr/bin/env bash
# Bundles the Open MPI runtime of this Debian machine (openmpi-bin, libopenmpi3) into DEST, for a
# GPU host that has no Debian packages: mpirun, the libraries and the MCA components that need
# nothing beyond glibc, zlib and the bundled libraries (no InfiniBand, UCX or libfabric: ranks on
# one host talk through shared memory, across hosts through TCP), and the help texts. On the host:
#   export OPAL_PREFIX=DEST/ompi PMIX_INSTALL_PREFIX=DEST/ompi LD_LIBRARY_PATH=DEST/ompi/lib64:$LD_LIBRARY_PATH
#   export PMIX_MCA_mca_base_component_path=DEST/ompi/lib/x86_64-linux-gnu/pmix2/lib/pmix
#   DEST/ompi/bin/mpirun -np 2 ...
# (Open MPI finds its components and texts relative to OPAL_PREFIX; PMIx its components there.)
set -euo pipefail
dest=${1:?usage: bundle_openmpi.sh DEST}
O=$dest/ompi
ml=/usr/lib/x86_64-linux-gnu/openmpi/lib
px=/usr/lib/x86_64-linux-gnu/pmix2/lib
rm -rf "$O"
mkdir -p "$O/bin" "$O/lib64" "$O${ml#/usr}/openmpi3" "$O${px#/usr}/pmix" "$O/share/openmpi"
cp -L /usr/bin/orterun "$O/bin/mpirun"
cp -L /usr/bin/orted "$O/bin/orted"
# The libraries every rank and mpirun load, found through LD_LIBRARY_PATH.
libs=(libmpi.so.40 libopen-rte.so.40 libopen-pal.so.40 libmpi_cxx.so.40 libhwloc.so.15 libevent_core-2.1.so.7
      libevent_pthreads-2.1.so.7 libudev.so.1 libpmix.so.2 libnuma.so.1 libmca_common_sm.so.40
      libmca_common_monitoring.so.50 libmca_common_ompio.so.41 libmunge.so.2)
for l in "${libs[@]}"; do cp -L "/lib/x86_64-linux-gnu/$l" "$O/lib64/" 2>/dev/null || cp -L "$ml/$l" "$O/lib64/"; done
ok=" libc.so.6 libm.so.6 libz.so.1 libdl.so.2 libpthread.so.0 librt.so.1 ${libs[*]} "
# Components whose every dependency is glibc, zlib or bundled.
take() {
  local f=$1 to=$2 dep
  for dep in $(ldd "$f" | awk '/=>/ {print $1}'); do
    [[ "$ok" == *" $dep "* ]] || return 0
  done
  cp -L "$f" "$to/"
}
for f in "$ml"/openmpi3/*.so; do take "$f" "$O${ml#/usr}/openmpi3"; done
for f in "$px"/pmix/*.so; do take "$f" "$O${px#/usr}/pmix"; done
cp -r /usr/share/openmpi/. "$O/share/openmpi/"
[[ -d /usr/share/pmix ]] && mkdir -p "$O/share/pmix" && cp -r /usr/share/pmix/. "$O/share/pmix/"
echo "bundled Open MPI $(orterun --version | head -1 | awk '{print $NF}') into $O: $(ls "$O${ml#/usr}/openmpi3" | wc -l) of $(ls "$ml"/openmpi3/*.so | wc -l) components, $(du -sh "$O" | cut -f1)"
