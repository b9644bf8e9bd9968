si_add_test(test_kernels SOURCES test_kernels.c LABELS "unit")
