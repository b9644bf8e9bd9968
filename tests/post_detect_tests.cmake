# YOLOv8 detection decoding (src/post_detect.c). post_detect_ref.py writes seeded random cases
# with expected detections from torchvision.ops.nms (cross-checked by its own numpy NMS), once, as
# a fixture; torchvision lives in .venv-torch, and without it the script uses numpy alone.
find_program(SI_TORCH_PYTHON python3 PATHS ${PROJECT_SOURCE_DIR}/.venv-torch/bin NO_DEFAULT_PATH)
if(SI_TORCH_PYTHON)
  set(SI_POST_DETECT_PYTHON ${SI_TORCH_PYTHON})
else()
  set(SI_POST_DETECT_PYTHON ${SI_PYTHON})
endif()
set(SI_POST_DETECT_DATA ${SI_TEST_DATA}/post_detect)

add_test(NAME post_detect_ref_data
  COMMAND ${SI_POST_DETECT_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/post_detect_ref.py gen
          ${SI_POST_DETECT_DATA})
set_tests_properties(post_detect_ref_data PROPERTIES FIXTURES_SETUP post_detect_ref_data
  LABELS unit)

si_add_test(test_post_detect SOURCES test_post_detect.c LABELS unit ARGS ${SI_POST_DETECT_DATA})
set_tests_properties(test_post_detect PROPERTIES FIXTURES_REQUIRED post_detect_ref_data)
