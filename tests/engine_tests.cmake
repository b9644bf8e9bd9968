# Engine tests: the protobuf reader on crafted bytes, ONNX's own node tests for the claimed ops,
# onnxruntime-made cases (random shapes and attributes), and the demo model against onnxruntime.
si_add_test(test_onnx_reader SOURCES test_onnx_reader.c LABELS "unit")
si_add_test(test_postprocess SOURCES test_postprocess.c LABELS "unit")

add_executable(run_onnx_cases run_onnx_cases.c)
target_link_libraries(run_onnx_cases PRIVATE si_core)
target_compile_options(run_onnx_cases PRIVATE -Wno-format-truncation)

set(SI_CASES ${SI_TEST_DATA}/cases)
add_test(NAME make_ref_cases
  COMMAND ${SI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/make_ref_cases.py --output-dir ${SI_CASES})
set_tests_properties(make_ref_cases PROPERTIES FIXTURES_SETUP ref_cases LABELS "unit")
add_test(NAME onnx_node_tests
  COMMAND run_onnx_cases --expect-unsupported ${CMAKE_CURRENT_SOURCE_DIR}/onnx_node_unsupported.txt
          ${SI_CASES}/node)
set_tests_properties(onnx_node_tests PROPERTIES FIXTURES_REQUIRED ref_cases LABELS "unit")
add_test(NAME ort_op_cases COMMAND run_onnx_cases ${SI_CASES}/ort)
set_tests_properties(ort_op_cases PROPERTIES FIXTURES_REQUIRED ref_cases LABELS "unit")
