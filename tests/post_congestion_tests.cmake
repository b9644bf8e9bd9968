# Congestion score (src/post/congestion.c). post_congestion_ref.py writes seeded maps, its exact
# port of the C sampling and k-means, and OpenCV's Canny and GaussianBlur of the same label maps
# once, as a fixture; the C test compares. OpenCV (opencv-python-headless) comes with .venv-torch
# (scripts/setup_torch.sh installs it for ultralytics), so CI compares against it.
set(SI_CONGESTION_DATA ${SI_TEST_DATA}/congestion)
add_test(NAME post_congestion_ref_data
  COMMAND ${SI_REF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/post_congestion_ref.py gen
          ${SI_CONGESTION_DATA})
set_tests_properties(post_congestion_ref_data PROPERTIES FIXTURES_SETUP post_congestion_ref_data
  LABELS unit)

si_add_test(test_post_congestion SOURCES test_post_congestion.c LABELS unit
  ARGS ${SI_CONGESTION_DATA})
set_tests_properties(test_post_congestion PROPERTIES FIXTURES_REQUIRED post_congestion_ref_data)
