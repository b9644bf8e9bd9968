# io/ tests. io_ref.py (Pillow, h5py from the venv) writes the JPEG references once, as a
# fixture; test_io makes its own files and calls io_ref.py to read what it wrote with h5py.
set(SI_IO_REF ${CMAKE_CURRENT_SOURCE_DIR}/io_ref.py)

add_test(NAME io_ref_data COMMAND ${SI_PYTHON} ${SI_IO_REF} gen ${SI_TEST_DATA}/io)
set_tests_properties(io_ref_data PROPERTIES FIXTURES_SETUP io_ref_data LABELS unit)

si_add_test(test_jpeg SOURCES test_jpeg.c LABELS unit ARGS ${SI_TEST_DATA}/io)
set_tests_properties(test_jpeg PROPERTIES FIXTURES_REQUIRED io_ref_data)

si_add_test(test_io SOURCES test_io.c LABELS unit ARGS ${SI_TEST_DATA} ${SI_PYTHON} ${SI_IO_REF})
