si_add_test(test_kernels SOURCES test_kernels.c LABELS "unit")

# The pthreads build of OpenBLAS found first (as on the GPU machine): the CPU backend says so and
# keeps BLAS to one thread inside its own threads instead of oversubscribing the cores.
set(SI_PTHREAD_BLAS_DIR /usr/lib/x86_64-linux-gnu/openblas-pthread)
if(EXISTS ${SI_PTHREAD_BLAS_DIR}/libopenblas.so.0)
  add_test(NAME blas_pthreads_guard
    COMMAND shardinfer bench --model ${SI_TEST_DATA}/e2e/tiny.onnx --batch 4 --threads 2 --iters 2)
  set_tests_properties(blas_pthreads_guard PROPERTIES FIXTURES_REQUIRED e2e_set LABELS unit
    ENVIRONMENT "LD_LIBRARY_PATH=${SI_PTHREAD_BLAS_DIR}"
    PASS_REGULAR_EXPRESSION "pthreads build.*running it single-threaded")
endif()
