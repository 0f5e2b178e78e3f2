# nodes.sh — two nodes rehearsed on one machine (sourced by scripts/run-tests.sh, section 8b).
#
# MPICH's launcher (hydra) can make this machine look like two nodes, two ways:
#   two hosts   mpirun -launcher fork -hosts localhost:2,127.0.0.1:2 -np 4: one proxy per "host"
#               (forked, no ssh), ranks 0, 1 on the first and 2, 3 on the second;
#   odd-even    MPIR_CVAR_ODD_EVEN_CLIQUES=1 mpirun -np 4: one proxy, the ranks split 0, 2 | 1, 3.
# Either way MPI_COMM_TYPE_SHARED returns each "node"'s ranks, and traffic between the two goes
# through MPICH's network module instead of shared memory: a real transport, on the same cores and
# the same memory. Checked here at np 4 (and np 2 for the thread rule):
#   - every rank's node, node-local rank and OpenMP threads are what launcher/node.h's rule says
#     (tests/launcher/test_node_mpi.cpp, NodeLayout.*, told the placement by TP_EXPECT_NODES);
#   - tp_train warns when a TP group spans the two nodes and says nothing when each stays inside one;
#   - tp 2 × dp 2 across the two hosts (TP inside each, DP between) trains the one-node curve;
#   - a rank SIGKILLed on the second node is named by that node's watchdog (launcher/watchdog.h)
#     and the job is gone within 10 s.
# Open MPI has no launcher option that splits one machine into nodes (4.1.4 tried: `--host
# localhost:2,127.0.0.1:2` is one node, MPI_COMM_TYPE_SHARED returns all four ranks); only the
# transport can be changed (`--mca pml ob1 --mca btl self,tcp`), so with Open MPI these checks are
# skipped with one line.
if ! "$MPIEXEC" --version 2>&1 | grep -q HYDRA; then
  echo "two-node rehearsal skipped: $MPIEXEC is not MPICH's hydra (Open MPI cannot make one machine two nodes; see README.md)"
  skipped=$((skipped + 1))
else
  two_hosts="-launcher fork -hosts localhost:2,127.0.0.1:2"
  two_hosts_1="-launcher fork -hosts localhost:1,127.0.0.1:1"  # one rank per "host"
  # nodes_layout NAME NP NODES: the node-layout tests at NP ranks, told the node of each rank.
  nodes_layout() {
    local name=$1 np=$2 nodes=$3 log=$logs/nodes_${1// /_}.log
    TP_EXPECT_NODES="$nodes" run_mpi "$np" "$BUILD/bin/test_mpi" \
      --gtest_filter='NodeLayout.*:ThreadRule.ThisRunFollowsTheRule:Grid.NodeOfEachRank*' >"$log" 2>&1
    tally "node layout, $name (nodes $nodes)" "$log" $?
    if grep -q '^tp-nodes:' "$log"; then echo "  ${name}: $(grep '^tp-nodes:' "$log" | cut -c11-)"
    else fail "node layout, $name: NodeLayout.EveryRankSeesTheStatedNodes did not run (see $log)"; fi
  }
  MPI_FLAGS="$MPI_FLAGS $two_hosts" nodes_layout "two hosts" 4 "0 0 1 1"
  MPIR_CVAR_ODD_EVEN_CLIQUES=1 nodes_layout "odd-even cliques" 4 "0 1 0 1"
  # One rank on each host: each has its node's whole mask (on one node the two would share it).
  MPI_FLAGS="$MPI_FLAGS $two_hosts_1" nodes_layout "two hosts, one rank each" 2 "0 1"

  # The placement warning (lib/parallel/process_grid.h): a TP group across the two nodes is named;
  # TP groups {0, 1} {2, 3} inside the two hosts are not.
  spans="spans nodes {0, 1}:"
  MPIR_CVAR_ODD_EVEN_CLIQUES=1 WITHIN=60 expect "odd-even, tp 4 warns" 0 "warning: TP group {0, 1, 2, 3} $spans" 4 \
    "${train[@]}" --steps 1
  MPIR_CVAR_ODD_EVEN_CLIQUES=1 WITHIN=60 expect "odd-even, tp 2 x dp 2 warns" 0 "warning: TP group {0, 1} $spans" 4 \
    "${train[@]}" --steps 1 --dp 2
  MPI_FLAGS="$MPI_FLAGS $two_hosts" WITHIN=60 expect "two hosts, tp 4 warns" 0 "warning: TP group {0, 1, 2, 3} $spans" 4 \
    "${train[@]}" --steps 1
  # tp 2 × dp 2 on the two hosts: no warning, and the curve of tp 2 × dp 2 on one node (section 5's
  # run; made here when this file runs alone).
  if [ ! -s "$tmp/dp2_np4.json" ]; then
    run_mpi 4 "${train[@]}" --steps 10 --dp 2 --log-json "$tmp/dp2_np4.json" >"$logs/train_dp2_np4.log" 2>&1 ||
      fail "tp_train --dp 2 at -np 4 on one node exited non-zero (see $logs/train_dp2_np4.log)"
  fi
  log=$logs/nodes_train_dp2_two_hosts.log
  MPI_FLAGS="$MPI_FLAGS $two_hosts" run_mpi 4 "${train[@]}" --steps 10 --dp 2 --log-json "$tmp/nodes_dp2.json" >"$log" 2>&1 ||
    fail "tp_train --dp 2 on two hosts exited non-zero (see $log)"
  if grep -qF "grid: tp 2 × dp 2 (TP groups {0, 1} {2, 3}; DP groups {0, 2} {1, 3})" "$log" && ! grep -q "spans nodes" "$log"; then
    pass 1; echo "✓ two hosts, tp 2 × dp 2: each TP group inside one host, no placement warning"
  else fail "two hosts, tp 2 × dp 2: no grid line, or a placement warning (see $log)"; fi
  same_curve "10-step loss curve, tp 2 × dp 2 across two hosts vs on one node" "$tmp/dp2_np4.json" "$tmp/nodes_dp2.json"

  # A rank SIGKILLed on the second node (tests/fail_one_rank.cpp kills the last rank, 3): the node
  # watchdogs, which share the deaths they see (launcher/watchdog.h), name it as the rank that died
  # first (the launcher's kills afterwards are marked as such), and the job is gone within 10 s.
  nodes_sigkill() {  # nodes_sigkill NAME ARGS...
    local name=$1 log=$logs/check_${1// /_}.log
    shift
    WITHIN=10 expect "$name" nonzero "rank 3 (pid" 4 "$BUILD/bin/fail_one_rank" --mode=sigkill "$@"
    grep -q "rank 3 (pid [0-9]*, host [^)]*) ended before the job finished (killed or crashed) at step" "$log" ||
      fail "$name: no watchdog line naming rank 3 as the rank that died (see $log)"
  }
  MPI_FLAGS="$MPI_FLAGS $two_hosts" nodes_sigkill "two hosts, SIGKILL of rank 3"
  MPI_FLAGS="$MPI_FLAGS $two_hosts" nodes_sigkill "two hosts, SIGKILL of rank 3, async all-reduce" --async
  MPIR_CVAR_ODD_EVEN_CLIQUES=1 nodes_sigkill "odd-even, SIGKILL of rank 3"
fi
