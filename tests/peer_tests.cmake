# The PyTorch peer (bench/torch_peer.py) and the harness that runs it beside shardinfer
# (bench/peer_harness.py), on the CPU here: 2 torchrun processes and 2 MPI ranks over the e2e
# set with squeezenet1_1 exported by the peer; with --exact-preprocess both must give the same
# statuses and the same top-1 class for every image (the speed ratio is measured on the GPU
# machine, docs/performance.md).
if(SI_TORCH_PYTHON)
  add_test(NAME peer_harness_cpu
    COMMAND ${SI_TORCH_PYTHON} ${PROJECT_SOURCE_DIR}/bench/peer_harness.py
            --set ${SI_E2E}/set.h5 --arch squeezenet1_1 --ranks 2 --batch 8 --workers 1
            --threads 1 --device cpu --exact --torch-python ${SI_TORCH_PYTHON}
            --shardinfer $<TARGET_FILE:shardinfer> --work ${SI_TEST_DATA}/peer --min-agreement 100)
  set_tests_properties(peer_harness_cpu PROPERTIES FIXTURES_REQUIRED e2e_set LABELS "slow;mpi"
    TIMEOUT 900 ENVIRONMENT "${SI_MPI_ENV}")
endif()
