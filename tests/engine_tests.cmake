# Engine tests: the protobuf reader on crafted bytes, ONNX's own node tests for the claimed ops,
# onnxruntime-made cases (random shapes and attributes), and the demo model against onnxruntime.
si_add_test(test_onnx_reader SOURCES test_onnx_reader.c LABELS "unit")
si_add_test(test_postprocess SOURCES test_postprocess.c LABELS "unit")

# The load-time check: a stub backend's refusals grouped into one message (si_engine_check).
add_test(NAME make_check_model
  COMMAND ${SI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/make_check_model.py
          --output ${SI_TEST_DATA}/engine_check.onnx)
set_tests_properties(make_check_model PROPERTIES FIXTURES_SETUP check_model LABELS "unit")
si_add_test(test_engine_check SOURCES test_engine_check.c LABELS "unit"
  ARGS ${SI_TEST_DATA}/engine_check.onnx)
set_tests_properties(test_engine_check PROPERTIES FIXTURES_REQUIRED check_model)

add_executable(run_onnx_cases run_onnx_cases.c)
target_link_libraries(run_onnx_cases PRIVATE si_core)
target_compile_options(run_onnx_cases PRIVATE -Wno-format-truncation)

# The demo model, converted from the pretrained weights that setup installs (never committed).
set(SI_DEMO_MODEL ${SI_TEST_DATA}/efficientnet_lite0.onnx)
add_test(NAME convert_demo_model
  COMMAND ${SI_PYTHON} ${PROJECT_SOURCE_DIR}/datasets/efficientnet_lite0_to_onnx.py --output ${SI_DEMO_MODEL})
set_tests_properties(convert_demo_model PROPERTIES FIXTURES_SETUP demo_model LABELS "unit")

set(SI_CASES ${SI_TEST_DATA}/cases)
add_test(NAME make_ref_cases
  COMMAND ${SI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/make_ref_cases.py --output-dir ${SI_CASES}
          --demo-model ${SI_DEMO_MODEL})
set_tests_properties(make_ref_cases PROPERTIES FIXTURES_SETUP ref_cases FIXTURES_REQUIRED demo_model
  LABELS "unit")

# ONNX's own node tests, held to the suite's rule (rtol 1e-3, atol 1e-7)
add_test(NAME onnx_node_tests
  COMMAND run_onnx_cases --prefix test_
          --expect-unsupported ${CMAKE_CURRENT_SOURCE_DIR}/onnx_node_unsupported.txt ${SI_CASES})
# onnxruntime-made random cases: values are O(1) sums of up to ~1000 products, so float32
# summation order alone moves results near zero by ~1e-6; atol 1e-5 keeps rtol 1e-3 meaningful
add_test(NAME ort_op_cases COMMAND run_onnx_cases --prefix si_ --atol 1e-5 ${SI_CASES})
# the demo model's logits on two real photos: max|ours - ort| / max|ort| <= 1e-4
add_test(NAME demo_model_vs_onnxruntime
  COMMAND run_onnx_cases --max-rel 1e-4 ${SI_CASES}/efficientnet_lite0_photo)
set_tests_properties(onnx_node_tests ort_op_cases demo_model_vs_onnxruntime PROPERTIES
  FIXTURES_REQUIRED ref_cases LABELS "unit")

# the CPU backend's synchronous slot (pixels -> submit -> collect) equals si_engine_run bit for bit
si_add_test(test_cpu_slots SOURCES test_cpu_slots.c LABELS "unit" ARGS ${SI_DEMO_MODEL})
set_tests_properties(test_cpu_slots PROPERTIES FIXTURES_REQUIRED demo_model)

# weights in a side file: same results as embedded, and no path may leave the model's directory
add_test(NAME external_data
  COMMAND ${SI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_external_data.py
          --runner $<TARGET_FILE:run_onnx_cases> --shardinfer $<TARGET_FILE:shardinfer>
          --cases ${SI_CASES} --work ${SI_TEST_DATA}/external)
set_tests_properties(external_data PROPERTIES FIXTURES_REQUIRED ref_cases LABELS "unit")

# Real PyTorch exports (torchvision's resnet50, mobilenet_v2/v3, efficientnet_b0, shufflenet,
# squeezenet, densenet121, regnet_y_400mf and ultralytics' YOLOv8n; random weights with realistic
# BatchNorm statistics; opset 17, legacy exporter, dynamic batch) made at test time by
# .venv-torch (scripts/setup_torch.sh): CPU outputs vs onnxruntime, max|diff|/max|ref| <= 1e-4.
if(SI_TORCH_PYTHON)
  add_test(NAME export_torch_models
    COMMAND ${SI_TORCH_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/export_models.py
            --output-dir ${SI_TEST_DATA}/models)
  set_tests_properties(export_torch_models PROPERTIES FIXTURES_SETUP torch_models
    LABELS "slow" TIMEOUT 900)
  add_test(NAME torch_models_vs_onnxruntime
    COMMAND run_onnx_cases --max-rel 1e-4 ${SI_TEST_DATA}/models)
  set_tests_properties(torch_models_vs_onnxruntime PROPERTIES FIXTURES_REQUIRED torch_models
    LABELS "slow")
else()
  message(STATUS "No .venv-torch: the real-export tests are left out (scripts/setup_torch.sh)")
endif()

# an unsupported model: operators grouped by type with counts, no cascade from their readers
add_test(NAME unsupported_message
  COMMAND ${SI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_unsupported_message.py
          --shardinfer $<TARGET_FILE:shardinfer> --work ${SI_TEST_DATA}/unsupported_message)
set_tests_properties(unsupported_message PROPERTIES LABELS "unit")
