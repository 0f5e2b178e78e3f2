#!/usr/bin/env bash
# offline-deps.sh — the build dependencies (MPICH, GoogleTest, nlohmann-json, OpenBLAS, make) for a machine
# that cannot install packages: the lent GPU machine reaches no package registry, and its image
# has CUDA but not necessarily MPI. Debian packages are fetched on a machine with apt, carried
# along (the device tool's `carry`), and unpacked under a prefix there — never into /.
#
#   scripts/offline-deps.sh download    here (Debian/Ubuntu, apt): the .deb files into
#                                       .offline-deps/ (git-ignored; about 20 MB)
#   . scripts/offline-deps.sh use       there: when mpicxx, GoogleTest or nlohmann-json is
#                                       missing, unpack .offline-deps/*.deb under $OFFLINE_PREFIX
#                                       (default /tmp/tp-offline), point MPICH's compiler wrappers
#                                       at it, and export PATH, CPATH, LIBRARY_PATH and
#                                       LD_LIBRARY_PATH; also NCCL_HOME when nccl.h is only in
#                                       Python's nvidia-nccl package. Sourced, so the exports stay.
#                                       OFFLINE_FORCE=1 uses the packages even when all is there.
#
# scripts/gpu-check.sh sources `use` itself when .offline-deps/ exists, so a GPU session runs
#   scripts/offline-deps.sh download        (here, once)
#   device run: command "make gpu-check", carry [".offline-deps"]
# The packages are this machine's distribution's (built for its glibc); a newer distribution
# there runs them, an older one may not.
OFFLINE_DIR=${OFFLINE_DIR:-.offline-deps}
OFFLINE_PREFIX=${OFFLINE_PREFIX:-/tmp/tp-offline}
# MPICH and the shared libraries it loads (beyond libc and libstdc++), GoogleTest (static), the
# JSON header, OpenBLAS (the OpenMP build: the CPU GEMM), make.
OFFLINE_PACKAGES="mpich libmpich-dev libmpich12 libhwloc15 libucx0 libibverbs1 librdmacm1 libnl-3-200
  libnl-route-3-200 libnuma1 libslurm38 libgfortran5 libquadmath0 libudev1 libgtest-dev
  nlohmann-json3-dev libopenblas0-openmp libopenblas-openmp-dev make"

offline_download() {
  command -v apt-get >/dev/null 2>&1 || { echo "offline-deps: download needs apt-get (Debian/Ubuntu)"; return 1; }
  mkdir -p "$OFFLINE_DIR"
  # shellcheck disable=SC2086
  (cd "$OFFLINE_DIR" && apt-get download $OFFLINE_PACKAGES >/dev/null 2>download.log) || {
    apt-get update -q >/dev/null 2>&1
    # shellcheck disable=SC2086
    (cd "$OFFLINE_DIR" && apt-get download $OFFLINE_PACKAGES >/dev/null 2>download.log) ||
      { cat "$OFFLINE_DIR/download.log"; echo "offline-deps: apt-get download failed"; return 1; }
  }
  rm -f "$OFFLINE_DIR/download.log"
  echo "offline-deps: $(ls "$OFFLINE_DIR"/*.deb | wc -l) packages, $(du -sh "$OFFLINE_DIR" | cut -f1), in $OFFLINE_DIR"
}

offline_have_all() { MPICXX=mpicxx MPIEXEC=mpirun scripts/install-deps.sh --check; }

offline_nccl() {  # NCCL_HOME from Python's nvidia-nccl package, when nccl.h is nowhere else
  local cuda nccl
  [ -n "${NCCL_HOME:-}" ] && return 0
  cuda=$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")")
  for f in "$cuda/include/nccl.h" /usr/include/nccl.h /usr/local/include/nccl.h; do [ -f "$f" ] && return 0; done
  nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null) || return 0
  [ -f "$nccl/include/nccl.h" ] || return 0
  # The wheel ships libnccl.so.2 only: a folder with the libnccl.so name the linker looks for.
  mkdir -p "$OFFLINE_PREFIX/nccl/lib"
  ln -sfn "$nccl/include" "$OFFLINE_PREFIX/nccl/include"
  ln -sf "$nccl/lib/libnccl.so.2" "$OFFLINE_PREFIX/nccl/lib/libnccl.so"
  ln -sf "$nccl/lib/libnccl.so.2" "$OFFLINE_PREFIX/nccl/lib/libnccl.so.2"
  export NCCL_HOME=$OFFLINE_PREFIX/nccl
  echo "offline-deps: NCCL from Python's nvidia-nccl package ($nccl)"
}

offline_use() {
  offline_nccl
  if [ "${OFFLINE_FORCE:-0}" != 1 ] && offline_have_all; then return 0; fi
  ls "$OFFLINE_DIR"/*.deb >/dev/null 2>&1 || { echo "offline-deps: MPI, GoogleTest, nlohmann-json or OpenBLAS is missing and $OFFLINE_DIR/ has no packages"; return 1; }
  local p=$OFFLINE_PREFIX usr lib w
  usr=$p/usr
  lib=$usr/lib/x86_64-linux-gnu
  if [ ! -x "$usr/bin/mpicxx.mpich" ]; then
    mkdir -p "$p"
    for f in "$OFFLINE_DIR"/*.deb; do dpkg -x "$f" "$p" || { echo "offline-deps: cannot unpack $f"; return 1; }; done
    # The wrappers name /usr; make them name the prefix, and put it in the programs' run path.
    for w in "$usr"/bin/mpicc.mpich "$usr"/bin/mpicxx.mpich; do
      sed -i -e "s|^prefix=/usr|prefix=$usr|" -e "s|^exec_prefix=/usr|exec_prefix=$usr|" \
             -e "s|^sysconfdir=/etc/mpich|sysconfdir=$p/etc/mpich|" \
             -e "s|^includedir=/usr/|includedir=$usr/|" -e "s|^libdir=/usr/|libdir=$usr/|" \
             -e "s|^final_ldflags=\" |final_ldflags=\" -Wl,-rpath,$lib |" "$w"
    done
    ln -sf mpicxx.mpich "$usr/bin/mpicxx"
    ln -sf mpicc.mpich "$usr/bin/mpicc"
    ln -sf mpiexec.hydra "$usr/bin/mpirun"
    ln -sf mpiexec.hydra "$usr/bin/mpiexec"
  fi
  # OpenBLAS lives in its variant's folders; unpacked, no alternatives point at them.
  export PATH=$usr/bin:$PATH
  export CPATH=$usr/include:$usr/include/x86_64-linux-gnu/openblas-openmp${CPATH:+:$CPATH}
  export LIBRARY_PATH=$lib:$lib/openblas-openmp${LIBRARY_PATH:+:$LIBRARY_PATH}
  export LD_LIBRARY_PATH=$lib:$lib/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  if offline_have_all; then
    echo "offline-deps: using MPICH, GoogleTest, nlohmann-json and OpenBLAS from $OFFLINE_DIR (unpacked in $p)"
  else
    echo "offline-deps: unpacked $OFFLINE_DIR into $p, but mpicxx still cannot build a GoogleTest program"
    return 1
  fi
}

case "${1:-}" in
  download) offline_download ;;
  use) offline_use ;;
  *) echo "usage: scripts/offline-deps.sh download | . scripts/offline-deps.sh use"; false ;;
esac
