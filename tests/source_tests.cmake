# Image sources (io/source.c). source_ref.py writes every layout from the same JPEGs with h5py,
# Pillow and `shardinfer pack`, once, as a fixture; test_source reads them all and compares.
set(SI_SOURCE_DATA ${SI_TEST_DATA}/source)
add_test(NAME source_ref_data
  COMMAND ${SI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/source_ref.py gen ${SI_SOURCE_DATA}
          $<TARGET_FILE:shardinfer>)
set_tests_properties(source_ref_data PROPERTIES FIXTURES_SETUP source_ref_data LABELS unit)

si_add_test(test_source SOURCES test_source.c LABELS unit ARGS ${SI_SOURCE_DATA})
set_tests_properties(test_source PROPERTIES FIXTURES_REQUIRED source_ref_data)
