# GPU tests: built only with CUDA; without a device they exit 77 and CTest reports them skipped.
# On the GPU machine: ctest -L gpu --output-on-failure (docs/user-guide.md, "GPU tests").
if(SI_HAVE_CUDA)
  si_add_test(test_gpu_preprocess SOURCES test_gpu_preprocess.c LABELS "gpu")
endif()
