# Runs that survive real clusters (tests/cluster.py), under mpirun with 1-4 CPU ranks: static and
# dynamic scheduling give identical files; a slowed rank makes dynamic win; SIGTERM, SIGUSR1 and
# SIGKILL mid-run, then --resume, give the file of an uninterrupted run; memory stays flat.
set(SI_CLUSTER_CMD ${SI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cluster.py
    --shardinfer $<TARGET_FILE:shardinfer> --dir ${SI_TEST_DATA}/cluster --e2e-dir ${SI_E2E})
add_test(NAME cluster_prepare COMMAND ${SI_CLUSTER_CMD} prepare)
set_tests_properties(cluster_prepare PROPERTIES FIXTURES_REQUIRED e2e_set
  FIXTURES_SETUP cluster_sets LABELS "mpi")
foreach(t schedules slow-rank sigterm sigusr1 kill memory writers)
  add_test(NAME cluster_${t} COMMAND ${SI_CLUSTER_CMD} ${t})
  # RUN_SERIAL: the timing and signal tests must not share the two cores with other tests
  set_tests_properties(cluster_${t} PROPERTIES FIXTURES_REQUIRED cluster_sets LABELS "mpi"
    TIMEOUT 600 RUN_SERIAL TRUE)
endforeach()

# A job array's parts merged == one run over the whole multi-file set, detections included (the
# detect model of tests/post_e2e.py).
add_test(NAME cluster_merge COMMAND ${SI_CLUSTER_CMD} merge
  --detect-model ${SI_TEST_DATA}/post_e2e/models/detect.onnx)
set_tests_properties(cluster_merge PROPERTIES FIXTURES_REQUIRED "cluster_sets;post_e2e_set"
  LABELS "mpi" TIMEOUT 600)

# The scheduler alone: every chunk handed out exactly once over 1 and 3 ranks.
add_executable(test_sched test_sched.c)
target_link_libraries(test_sched PRIVATE si_core)
add_test(NAME test_sched_np1 COMMAND mpirun -np 1 $<TARGET_FILE:test_sched>)
add_test(NAME test_sched_np3 COMMAND mpirun -np 3 $<TARGET_FILE:test_sched>)
set_tests_properties(test_sched_np1 test_sched_np3 PROPERTIES LABELS "mpi"
  ENVIRONMENT "${SI_MPI_ENV}" TIMEOUT 300)
si_add_test(test_chunk SOURCES test_chunk.c LABELS unit)

# Ranks on different "nodes": network namespaces with their own hostname and address, mpirun's
# daemons started in them by tests/ns_agent.sh, TCP between them (tests/multinode_test.py).
add_test(NAME multinode_namespaces COMMAND ${SI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/multinode_test.py
  --shardinfer $<TARGET_FILE:shardinfer> --cluster-dir ${SI_TEST_DATA}/cluster)
set_tests_properties(multinode_namespaces PROPERTIES FIXTURES_REQUIRED cluster_sets
  LABELS "mpi" TIMEOUT 600 RUN_SERIAL TRUE SKIP_RETURN_CODE 77)
