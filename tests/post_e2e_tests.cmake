# End-to-end tests of `shardinfer run --post MODE` under mpirun (label mpi), one per
# postprocessor, on 20 real-photo JPEGs with a truncated and a corrupt one: the engine's outputs
# against onnxruntime, the postprocessing against numpy, OpenCV (post_congestion_ref.py) and
# torchvision.ops.nms (post_detect_ref.py) applied both to the engine's own raw outputs (exactly)
# and to onnxruntime's (within float tolerance). The driver needs h5py (SI_PYTHON's venv); the
# references run under SI_REF_PYTHON (.venv-torch: OpenCV, torchvision). Without OpenCV the
# congestion test reports itself skipped.
set(SI_POST_E2E_CMD ${SI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/post_e2e.py
    --shardinfer $<TARGET_FILE:shardinfer> --dir ${SI_TEST_DATA}/post_e2e
    --ref-python ${SI_REF_PYTHON})
add_test(NAME post_e2e_prepare COMMAND ${SI_POST_E2E_CMD} prepare)
set_tests_properties(post_e2e_prepare PROPERTIES FIXTURES_SETUP post_e2e_set LABELS "mpi"
  TIMEOUT 300)
foreach(mode classify embed congestion raw detect bad-post)
  string(REPLACE "-" "_" name ${mode})
  add_test(NAME post_e2e_${name} COMMAND ${SI_POST_E2E_CMD} ${mode})
  set_tests_properties(post_e2e_${name} PROPERTIES FIXTURES_REQUIRED post_e2e_set LABELS "mpi"
    TIMEOUT 300 SKIP_RETURN_CODE 77)
endforeach()
