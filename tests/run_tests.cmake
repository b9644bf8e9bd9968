# End-to-end tests of the binary under mpirun (label mpi): pack -> run with 1, 2, 3 ranks on a
# set of 23 images with a truncated and a corrupt JPEG -> verify with h5py -> identical results;
# the demo photos classified by the pretrained model; bad input of every kind.
set(SI_E2E ${SI_TEST_DATA}/e2e)
set(SI_E2E_CMD ${SI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e.py --shardinfer $<TARGET_FILE:shardinfer> --dir ${SI_E2E})
add_test(NAME e2e_prepare COMMAND ${SI_E2E_CMD} prepare)
set_tests_properties(e2e_prepare PROPERTIES FIXTURES_SETUP e2e_set LABELS "mpi")
foreach(np 1 2 3)
  add_test(NAME e2e_run_np${np} COMMAND ${SI_E2E_CMD} run --np ${np})
  set_tests_properties(e2e_run_np${np} PROPERTIES FIXTURES_REQUIRED e2e_set
    FIXTURES_SETUP e2e_results LABELS "mpi" TIMEOUT 300)
endforeach()
add_test(NAME e2e_same_results_across_ranks COMMAND ${SI_E2E_CMD} compare --np 1 2 3)
set_tests_properties(e2e_same_results_across_ranks PROPERTIES
  FIXTURES_REQUIRED "e2e_set;e2e_results" LABELS "mpi")
add_test(NAME e2e_bad_inputs COMMAND ${SI_E2E_CMD} bad-inputs)
set_tests_properties(e2e_bad_inputs PROPERTIES FIXTURES_REQUIRED e2e_set LABELS "mpi" TIMEOUT 900)

add_test(NAME e2e_hostile_images COMMAND ${SI_E2E_CMD} hostile --io-dir ${SI_TEST_DATA}/io)
set_tests_properties(e2e_hostile_images PROPERTIES FIXTURES_REQUIRED "e2e_set;io_ref_data"
  FIXTURES_SETUP hostile_set LABELS "mpi" TIMEOUT 300)

add_test(NAME e2e_every_layout COMMAND ${SI_E2E_CMD} layouts --source-dir ${SI_TEST_DATA}/source)
set_tests_properties(e2e_every_layout PROPERTIES FIXTURES_REQUIRED "e2e_set;source_ref_data"
  LABELS "mpi" TIMEOUT 600)

add_test(NAME imagenet_classes
  COMMAND ${SI_PYTHON} ${PROJECT_SOURCE_DIR}/datasets/imagenet_classes.py --output ${SI_TEST_DATA}/imagenet_classes.txt)
set_tests_properties(imagenet_classes PROPERTIES FIXTURES_SETUP classes LABELS "mpi")
add_test(NAME e2e_demo_photos
  COMMAND ${SI_E2E_CMD} demo --model ${SI_TEST_DATA}/efficientnet_lite0.onnx --labels ${SI_TEST_DATA}/imagenet_classes.txt)
set_tests_properties(e2e_demo_photos PROPERTIES FIXTURES_REQUIRED "e2e_set;demo_model;classes"
  LABELS "mpi;slow" TIMEOUT 900)

# The job as a library call (src/job), without argv, on the e2e set; its rows must equal those of
# `shardinfer run` with the same settings (e2e_run_np1: --batch 4).
si_add_test(test_job SOURCES test_job.c LABELS "unit" ARGS ${SI_E2E})
set_tests_properties(test_job PROPERTIES FIXTURES_REQUIRED "e2e_set;e2e_results"
  FIXTURES_SETUP job_result ENVIRONMENT "${SI_MPI_ENV}" TIMEOUT 300)
add_test(NAME test_job_same_as_cli COMMAND ${SI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/check_results.py
  compare ${SI_E2E}/result_np1.h5 ${SI_E2E}/result_job.h5)
set_tests_properties(test_job_same_as_cli PROPERTIES
  FIXTURES_REQUIRED "e2e_set;e2e_results;job_result" LABELS "unit")
