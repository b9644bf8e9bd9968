# A real one-node Slurm (munge, slurmctld, slurmd from Debian's packages) started by the test:
# the project's sbatch template gives the mpirun result, and USR1 -> drain -> requeue -> resume
# gives it too (tests/slurm_test.py). Needs root; skipped otherwise.
add_test(NAME slurm_sbatch_and_requeue
  COMMAND ${SI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/slurm_test.py
          --shardinfer $<TARGET_FILE:shardinfer> --dir ${SI_TEST_DATA}/slurm
          --cluster-dir ${SI_TEST_DATA}/cluster)
set_tests_properties(slurm_sbatch_and_requeue PROPERTIES FIXTURES_REQUIRED cluster_sets
  LABELS "slurm" TIMEOUT 900 RUN_SERIAL TRUE SKIP_RETURN_CODE 77)
