# bench/gather_bench on two ranks with small sizes: NCCL and host-MPI gathers of GPU-resident rows
# to rank 0, each result verified element by element. Without a GPU every rank exits 77 (skipped).
# On a one-GPU machine both ranks share the GPU and only the host method runs (NCCL refuses it).
if(TARGET gather_bench)
  add_test(NAME gather_bench_np2
    COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${MPIEXEC_PREFLAGS}
            $<TARGET_FILE:gather_bench> ${MPIEXEC_POSTFLAGS}
            --rows 1,64,1000 --dims 7,512 --iters 3 --warmup 1)
  set_tests_properties(gather_bench_np2 PROPERTIES LABELS "gpu;mpi" SKIP_RETURN_CODE 77
    ENVIRONMENT "${SI_MPI_ENV}" TIMEOUT 120)
endif()
