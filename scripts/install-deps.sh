#!/usr/bin/env bash
# install-deps.sh — checks what the build needs and installs what is missing.
#
#   scripts/install-deps.sh          MPI (mpicxx + mpirun), OpenMP, GoogleTest, nlohmann-json, ICU,
#                                    OpenBLAS; oneDNN where apt-get has it (optional: NO_ONEDNN=1 skips)
#   scripts/install-deps.sh --docs   the same, plus Doxygen, Graphviz (the pictures) and MathJax 2
#                                    (the formulas; Debian's libjs-mathjax, copied into docs/html
#                                    so the pages need no network; MATHJAX_DIR says where it is)
#   scripts/install-deps.sh --check  installs nothing, prints nothing: exit 0 when nothing is
#                                    missing (scripts/offline-deps.sh asks this)
#   scripts/install-deps.sh --openmpi   Debian only: Open MPI beside MPICH (openmpi-bin,
#                                    libopenmpi-dev) for make openmpi-quick, with mpicxx and mpirun
#                                    set back to MPICH (installing Open MPI moves them to itself)
#   NO_CUDA=1 scripts/install-deps.sh   the GPU line says the GPU backend is skipped
#   DEPS_CACHE=FILE scripts/install-deps.sh
#                                    reuse the report in FILE when it was made for the same MPICXX
#                                    and mpicxx is still there (the Makefile passes build/.deps)
#
# On Debian/Ubuntu it installs the missing packages with apt-get (through sudo when not root) and
# says which. Elsewhere it prints the command for your system and stops (exit 1).
# Honours MPICXX and MPIEXEC like the Makefile. Prints one ✓/✗ line per component, and a last
# line on the GPU backend (optional: nvcc found → built; else skipped, which is not an error).
# The Makefile passes its own decision in GPU_BACKEND ("yes" or "no: <why>"); run by hand, the
# script finds nvcc the way the Makefile does (NVCC, nvcc on PATH, /usr/local/cuda/bin/nvcc).
set -u
MPICXX=${MPICXX:-mpicxx}
MPIEXEC=${MPIEXEC:-mpirun}
docs=0 check=0 openmpi=0
[ "${1:-}" = "--docs" ] && docs=1
[ "${1:-}" = "--check" ] && check=1
[ "${1:-}" = "--openmpi" ] && openmpi=1

# apt_install LOG PKG...: apt-get install (through sudo when not root), once more after an
# apt-get update when the package lists are stale; the log's tail and a ✗ line when it fails.
apt_install() {
  local log=$1 sudo=""; shift
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "✗ need root or sudo to run: apt-get install -y $*"; return 1; }
    sudo="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y -q --no-install-recommends "$@" >"$log" 2>&1 && return 0
  $sudo apt-get update -q >"$log" 2>&1
  $sudo apt-get install -y -q --no-install-recommends "$@" >>"$log" 2>&1 ||
    { tail -20 "$log"; echo "✗ apt-get install $* failed (log above)"; return 1; }
}

# --openmpi: Open MPI beside MPICH, for make openmpi-quick. Debian's Open MPI takes over the mpi
# and mpirun alternatives (mpicxx, mpicc, mpirun lead to it) when it installs; where MPICH is
# installed too, both are set back to MPICH at once, so everything else keeps building and running
# MPICH, and Open MPI stays reachable as mpicxx.openmpi / mpirun.openmpi.
if [ $openmpi = 1 ]; then
  command -v apt-get >/dev/null 2>&1 ||
    { echo "✗ --openmpi installs Debian's Open MPI (apt-get); elsewhere install Open MPI and pass OMPI_MPICXX, OMPI_MPIEXEC to make openmpi-quick"; exit 1; }
  log=$(mktemp)
  if ! command -v mpicxx.openmpi >/dev/null 2>&1 || ! command -v mpirun.openmpi >/dev/null 2>&1; then
    echo "installing Debian packages: openmpi-bin libopenmpi-dev"
    apt_install "$log" openmpi-bin libopenmpi-dev || exit 1
  fi
  rm -f "$log"
  sudo=""; [ "$(id -u)" != 0 ] && sudo="sudo"
  for alt in mpi:/usr/bin/mpicc.mpich mpirun:/usr/bin/mpirun.mpich; do
    name=${alt%%:*} target=${alt#*:}
    [ -x "$target" ] || continue
    [ "$(readlink -f "/etc/alternatives/$name")" = "$(readlink -f "$target")" ] ||
      $sudo update-alternatives --quiet --set "$name" "$target" || exit 1
  done
  lead=$(readlink -f "$(command -v mpirun)" 2>/dev/null)
  mpicxx -show 2>/dev/null | grep -qi mpich && lead=MPICH
  echo "✓ $(mpicxx.openmpi --showme:version 2>&1 | grep -o 'Open MPI [0-9.]*' | head -1) as mpicxx.openmpi and mpirun.openmpi; mpicxx and mpirun: ${lead:-none}"
  exit 0
fi

# The GPU backend line: never cached (NO_CUDA or NVCC may change between calls), never fatal.
gpu_line() {
  local nvcc=${NVCC:-} decision=${GPU_BACKEND:-}
  [ -z "$nvcc" ] && nvcc=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; } || true)
  if [ -z "$decision" ]; then
    if [ "${NO_CUDA:-}" = 1 ]; then decision="no: NO_CUDA=1"
    elif [ -z "$nvcc" ]; then decision="no: nvcc not found"
    else decision=yes; fi
  fi
  case "$decision" in
    yes) echo "✓ nvcc found ($("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/CUDA \1/p'), $nvcc): building the GPU backend (cuBLAS, NCCL)" ;;
    "no: NO_CUDA=1") echo "· NO_CUDA=1: skipping GPU backend" ;;
    "no: nvcc not found") echo "✗ nvcc not found, skipping GPU backend" ;;
    *) echo "· ${decision#no: }: skipping GPU backend" ;;
  esac
}

cache=${DEPS_CACHE:-}
# The report is kept for these names and where they lead now (Debian's mpicxx and mpirun move to
# Open MPI when it is installed beside MPICH: the same names, another MPI).
where() { readlink -f "$(command -v "$1")" 2>/dev/null; }
cache_key="$MPICXX $MPIEXEC $docs gpu-line-apart blas onednn${NO_ONEDNN:-} $(where "$MPICXX") $(where "$MPIEXEC")"
if [ -n "$cache" ] && [ -f "$cache" ] && [ "$(head -1 "$cache")" = "$cache_key" ] &&
   command -v "$MPICXX" >/dev/null 2>&1 && command -v "$MPIEXEC" >/dev/null 2>&1; then
  tail -n +2 "$cache"
  gpu_line
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

have_mpi()    { command -v "$MPICXX" >/dev/null 2>&1 && command -v "$MPIEXEC" >/dev/null 2>&1; }
have_openmp() {
  printf '#include <omp.h>\nint main(){return omp_get_max_threads()>0?0:1;}\n' > "$tmp/omp.cpp"
  "$MPICXX" -fopenmp "$tmp/omp.cpp" -o "$tmp/omp" >/dev/null 2>&1
}
have_gtest() {
  printf '#include <gtest/gtest.h>\nTEST(A,B){EXPECT_EQ(1,1);}\n' > "$tmp/gt.cpp"
  local cxx=$MPICXX; command -v "$cxx" >/dev/null 2>&1 || cxx=c++
  "$cxx" "$tmp/gt.cpp" -o "$tmp/gt" -lgtest_main -lgtest -pthread >/dev/null 2>&1
}
have_json() {
  printf '#include <nlohmann/json.hpp>\nint main(){return nlohmann::json::parse("[1]").size()==1?0:1;}\n' > "$tmp/js.cpp"
  local cxx=$MPICXX; command -v "$cxx" >/dev/null 2>&1 || cxx=c++
  "$cxx" -std=c++17 -fsyntax-only "$tmp/js.cpp" >/dev/null 2>&1
}
# ICU's character classes (lib/text: GPT-2's pre-tokeniser), linked as the Makefile links them.
have_icu() {
  printf '#include <unicode/uchar.h>\nint main(){return (U_GET_GC_MASK(0x4E2D)&U_GC_L_MASK)?0:1;}\n' > "$tmp/icu.cpp"
  local cxx=$MPICXX; command -v "$cxx" >/dev/null 2>&1 || cxx=c++
  # shellcheck disable=SC2086
  "$cxx" "$tmp/icu.cpp" -o "$tmp/icu" ${ICU_LIBS:--licuuc} >/dev/null 2>&1 && "$tmp/icu"
}
# OpenBLAS: cblas_sgemm and its thread control link (BLAS_LIBS, as the Makefile links them).
have_openblas() {
  printf '#include <cblas.h>\nextern "C" char* openblas_get_config(void);\nint main(){float a=1,b=2,c=0;cblas_sgemm(CblasRowMajor,CblasNoTrans,CblasNoTrans,1,1,1,1.f,&a,1,&b,1,0.f,&c,1);return c==2&&openblas_get_config()?0:1;}\n' > "$tmp/blas.cpp"
  local cxx=$MPICXX; command -v "$cxx" >/dev/null 2>&1 || cxx=c++
  # shellcheck disable=SC2086
  "$cxx" ${CXXFLAGS_EXTRA:-} "$tmp/blas.cpp" -o "$tmp/blas" ${BLAS_LIBS:--lopenblas} >/dev/null 2>&1 && "$tmp/blas"
}
# oneDNN (optional): the CPU's bf16 GEMM where the CPU has AVX512-BF16/AMX (cpu_backend/onednn_gemm.h).
have_onednn() {
  printf '#include <dnnl.hpp>\nint main(){return dnnl::version()->major>=2?0:1;}\n' > "$tmp/dnnl.cpp"
  local cxx=$MPICXX; command -v "$cxx" >/dev/null 2>&1 || cxx=c++
  "$cxx" -std=c++17 "$tmp/dnnl.cpp" -o "$tmp/dnnl" -ldnnl >/dev/null 2>&1 && "$tmp/dnnl"
}
have_doxygen() { command -v doxygen >/dev/null 2>&1; }
have_dot()     { command -v dot >/dev/null 2>&1; }
have_mathjax() { [ -f "${MATHJAX_DIR:-/usr/share/javascript/mathjax}/MathJax.js" ]; }

missing() {  # prints the Debian packages still needed
  local pkgs=()
  have_mpi || pkgs+=(mpich libmpich-dev)
  have_gtest || pkgs+=(libgtest-dev)
  have_json || pkgs+=(nlohmann-json3-dev)
  have_icu || pkgs+=(libicu-dev)
  have_openblas || pkgs+=(libopenblas-openmp-dev)  # the OpenMP build: its threads follow OpenMP's
  [ $docs = 1 ] && ! have_doxygen && pkgs+=(doxygen)
  [ $docs = 1 ] && ! have_dot && pkgs+=(graphviz)
  [ $docs = 1 ] && ! have_mathjax && pkgs+=(libjs-mathjax)
  # make test: scripts/check-layers.py, check-lessons.py and check-format.sh
  command -v python3 >/dev/null 2>&1 || pkgs+=(python3)
  command -v clang-format >/dev/null 2>&1 || pkgs+=(clang-format)
  command -v make >/dev/null 2>&1 || pkgs+=(make)
  command -v g++ >/dev/null 2>&1 || pkgs+=(g++)
  echo "${pkgs[@]:-}"
}

# A wrapper told to call a compiler that is not there (MPICH_CXX or OMPI_CXX) compiles nothing, and
# every check below would then read as a missing library (and try to install it): say so first.
if have_mpi && [ -n "${MPICH_CXX:-}${OMPI_CXX:-}" ]; then
  printf 'int main(){return 0;}\n' > "$tmp/cc.cpp"
  if ! "$MPICXX" "$tmp/cc.cpp" -o "$tmp/cc" >"$tmp/cc.log" 2>&1; then
    echo "✗ $MPICXX cannot compile a C++ program with${MPICH_CXX:+ MPICH_CXX=$MPICH_CXX}${OMPI_CXX:+ OMPI_CXX=$OMPI_CXX}: $(head -1 "$tmp/cc.log"); install that compiler, or unset the variable"
    exit 1
  fi
fi

need=$(missing)
[ $check = 1 ] && { [ -z "$need" ]; exit; }
if [ -n "$need" ]; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian packages: $need"
    # shellcheck disable=SC2086
    apt_install "$tmp/apt.log" $need || exit 1
  else
    echo "✗ missing: MPI, GoogleTest, nlohmann-json, OpenBLAS or Doxygen, and this is not a Debian/Ubuntu system. Install them with:"
    case "$(uname -s)" in
      Darwin) echo "    brew install mpich libomp googletest nlohmann-json openblas doxygen graphviz"
              echo "  (make docs: MathJax 2.7 unpacked somewhere, passed as MATHJAX_DIR)"
              echo "  and build with: make MPICXX=mpicxx CXXFLAGS_EXTRA=\"-Xpreprocessor -I\$(brew --prefix libomp)/include\" LDFLAGS_EXTRA=\"-L\$(brew --prefix libomp)/lib -lomp\" BLAS_LIBS=\"-L\$(brew --prefix openblas)/lib -lopenblas\" (and -I\$(brew --prefix openblas)/include in CXXFLAGS_EXTRA)" ;;
      *)
        if command -v dnf >/dev/null 2>&1; then
          echo "    sudo dnf install -y mpich-devel gtest-devel json-devel openblas-devel doxygen graphviz gcc-c++ make && module load mpi/mpich-x86_64"
        elif command -v pacman >/dev/null 2>&1; then
          echo "    sudo pacman -S --needed mpich gtest nlohmann-json openblas doxygen graphviz base-devel"
        elif command -v zypper >/dev/null 2>&1; then
          echo "    sudo zypper install mpich-devel gtest nlohmann_json-devel openblas-devel doxygen graphviz gcc-c++ make"
        else
          echo "    an MPI implementation with mpicxx (MPICH or Open MPI), GoogleTest, nlohmann-json, OpenBLAS (CBLAS), Doxygen, a C++17 compiler with OpenMP"
        fi ;;
    esac
    exit 1
  fi
fi

# oneDNN is optional: installed where apt-get has it (NO_ONEDNN=1: not asked); a failure only
# means the CPU's bf16 GEMMs run as sgemm on f32 stand-ins.
if [ "${NO_ONEDNN:-}" != 1 ] && ! have_onednn && command -v apt-get >/dev/null 2>&1; then
  sudo=""; [ "$(id -u)" != 0 ] && sudo="sudo"
  if [ -z "$sudo" ] || command -v sudo >/dev/null 2>&1; then
    echo "installing Debian packages: libdnnl-dev (optional)"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends libdnnl-dev >"$tmp/apt-dnnl.log" 2>&1 ||
      echo "· libdnnl-dev could not be installed (see apt-get); continuing without oneDNN"
  fi
fi

# ---- report -------------------------------------------------------------------------------------
report() {
status=0
if have_mpi; then
  if "$MPICXX" -show 2>/dev/null | grep -qi mpich; then
    impl="MPICH $(mpichversion 2>/dev/null | sed -n 's/^MPICH Version:[[:space:]]*//p' | head -1)"
  elif "$MPICXX" --showme:version >/dev/null 2>&1; then
    impl=$("$MPICXX" --showme:version 2>&1 | grep -o 'Open MPI [0-9.]*' | head -1)
  else
    impl="unknown MPI"
  fi
  echo "✓ MPI: $MPICXX (${impl% }), $MPIEXEC"
else
  echo "✗ MPI: $MPICXX or $MPIEXEC not found"; status=1
fi
if have_mpi && have_openmp; then echo "✓ OpenMP"; else echo "✗ OpenMP: $MPICXX -fopenmp does not compile a test program"; status=1; fi
if have_gtest; then echo "✓ GoogleTest"; else echo "✗ GoogleTest not found (libgtest-dev)"; status=1; fi
if have_json; then echo "✓ nlohmann-json"; else echo "✗ nlohmann-json not found (nlohmann-json3-dev)"; status=1; fi
if have_icu; then echo "✓ ICU (Unicode classes for the tokenizer)"; else echo "✗ ICU not found: lib/text needs unicode/uchar.h and -licuuc (libicu-dev)"; status=1; fi
if have_openblas; then
  printf '#include <cstdio>\nextern "C" char* openblas_get_config(void);\nextern "C" int openblas_get_parallel(void);\nint main(){std::printf("%%s|%%d",openblas_get_config(),openblas_get_parallel());}\n' > "$tmp/bv.cpp"
  # shellcheck disable=SC2086
  "${MPICXX}" ${CXXFLAGS_EXTRA:-} "$tmp/bv.cpp" -o "$tmp/bv" ${BLAS_LIBS:--lopenblas} >/dev/null 2>&1
  info=$("$tmp/bv" 2>/dev/null); par=${info##*|}; ver=$(echo "${info%|*}" | awk '{print $1, $2}')
  threading=sequential; [ "$par" = 1 ] && threading=pthreads; [ "$par" = 2 ] && threading=OpenMP
  echo "✓ $ver ($threading) for the CPU GEMM"
else
  echo "✗ OpenBLAS not found: the CPU GEMM needs cblas_sgemm (Debian: libopenblas-openmp-dev; Homebrew: openblas)"; status=1
fi
if [ "${NO_ONEDNN:-}" = 1 ]; then echo "· NO_ONEDNN=1: CPU bf16 GEMMs run as sgemm on f32 stand-ins"
elif have_onednn; then
  printf '#include <cstdio>\n#include <dnnl.hpp>\nint main(){auto v=dnnl::version();std::printf("%%d.%%d.%%d",v->major,v->minor,v->patch);}\n' > "$tmp/dv.cpp"
  "${MPICXX}" "$tmp/dv.cpp" -o "$tmp/dv" -ldnnl >/dev/null 2>&1
  echo "✓ oneDNN $("$tmp/dv" 2>/dev/null) for the CPU's bf16 GEMM (optional)"
else echo "· oneDNN not found (optional, libdnnl-dev): CPU bf16 GEMMs run as sgemm on f32 stand-ins"; fi
if [ $docs = 1 ]; then
  if have_doxygen; then echo "✓ Doxygen $(doxygen --version)"; else echo "✗ Doxygen not found"; status=1; fi
  if have_dot; then echo "✓ Graphviz dot"; else echo "✗ Graphviz dot not found (graphviz)"; status=1; fi
  mj=${MATHJAX_DIR:-/usr/share/javascript/mathjax}
  if have_mathjax; then echo "✓ MathJax $(sed -n 's/.*MathJax.version *= *\"\([0-9.]*\)\".*/\1/p' "$mj/MathJax.js" | head -1) ($mj)"
  else echo "✗ MathJax 2 not found in $mj (Debian: libjs-mathjax; elsewhere: set MATHJAX_DIR to an unpacked MathJax 2.7)"; status=1; fi
fi
return $status
}
report >"$tmp/report"
status=$?
cat "$tmp/report"
gpu_line
if [ $status = 0 ] && [ -n "$cache" ]; then
  mkdir -p "$(dirname "$cache")"
  { echo "$cache_key"; cat "$tmp/report"; } >"$cache"
fi
exit $status
