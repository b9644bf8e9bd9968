# `shardinfer exec` and its .npy reader/writer: the reader on crafted files, then every reference
# case (DIR/<case>/model.onnx + test_data_set_0) run through the command line and compared.
si_add_test(test_npy SOURCES test_npy.c LABELS "unit")

add_test(NAME test_exec
  COMMAND ${SI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_exec.py
          --shardinfer $<TARGET_FILE:shardinfer> --cases ${SI_TEST_DATA}/cases)
set_tests_properties(test_exec PROPERTIES FIXTURES_REQUIRED ref_cases LABELS "unit")
