# YOLOv8 detection decoding (src/post/detect.c). post_detect_ref.py writes seeded random cases
# with expected detections from torchvision.ops.nms (cross-checked by its own numpy NMS), once, as
# a fixture; torchvision lives in .venv-torch, and without it the script uses numpy alone.
set(SI_POST_DETECT_DATA ${SI_TEST_DATA}/post_detect)

add_test(NAME post_detect_ref_data
  COMMAND ${SI_REF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/post_detect_ref.py gen
          ${SI_POST_DETECT_DATA})
set_tests_properties(post_detect_ref_data PROPERTIES FIXTURES_SETUP post_detect_ref_data
  LABELS unit)

si_add_test(test_post_detect SOURCES test_post_detect.c LABELS unit ARGS ${SI_POST_DETECT_DATA})
set_tests_properties(test_post_detect PROPERTIES FIXTURES_REQUIRED post_detect_ref_data)
