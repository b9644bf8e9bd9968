# GPU tests: built only with CUDA; without a device they exit 77 and CTest reports them skipped.
# On the GPU machine: ctest -L gpu --output-on-failure (docs/user-guide.md, "GPU tests").
if(SI_HAVE_CUDA)
  si_add_test(test_gpu_preprocess SOURCES test_gpu_preprocess.c LABELS "gpu")
  si_add_test(test_gpu_resize SOURCES test_gpu_resize.c LABELS "gpu")
endif()

# The CUDA backend against ONNX's own node tests (the suite's rule, as the CPU's onnx_node_tests)
# and against the CPU backend op by op: FP32 within 1e-5 and FP16 within 2e-2 of
# max|cpu|, per case, on the same inputs.
if(SI_HAVE_CUDA)
  add_test(NAME gpu_onnx_node_tests
    COMMAND run_onnx_cases --backend cuda --precision fp32 --prefix test_
            --expect-unsupported ${CMAKE_CURRENT_SOURCE_DIR}/onnx_node_unsupported.txt ${SI_CASES})
  add_test(NAME gpu_parity_fp32
    COMMAND run_onnx_cases --backend cuda --precision fp32 --vs-cpu 1e-5 --no-ref
            --expect-unsupported ${CMAKE_CURRENT_SOURCE_DIR}/onnx_node_unsupported.txt ${SI_CASES})
  add_test(NAME gpu_parity_fp16
    COMMAND run_onnx_cases --backend cuda --precision fp16 --vs-cpu 2e-2 --no-ref
            --expect-unsupported ${CMAKE_CURRENT_SOURCE_DIR}/onnx_node_unsupported.txt
            --skip ${CMAKE_CURRENT_SOURCE_DIR}/onnx_gpu_fp16_skip.txt ${SI_CASES})
  # the slot ring, short batches and the no-allocation steady state, on the demo model
  si_add_test(test_gpu_engine SOURCES test_gpu_engine.c LABELS "gpu" ARGS ${SI_DEMO_MODEL})
  # the depthwise kernel (cuda/dwconv.cu) in BF16 on its own cases, and the op cases with
  # SI_CUDNN_DEPTHWISE=1 (cuDNN's depthwise convs, no prologue fusion), so the A/B switch's side
  # stays correct too
  add_test(NAME gpu_parity_bf16_depthwise
    COMMAND run_onnx_cases --backend cuda --precision bf16 --vs-cpu 5e-2 --no-ref
            --prefix si_dwconv ${SI_CASES})
  add_test(NAME gpu_parity_fp16_cudnn_depthwise
    COMMAND run_onnx_cases --backend cuda --precision fp16 --vs-cpu 2e-2 --no-ref --prefix si_
            ${SI_CASES})
  set_tests_properties(gpu_parity_fp16_cudnn_depthwise PROPERTIES ENVIRONMENT
    SI_CUDNN_DEPTHWISE=1)
  set_tests_properties(gpu_onnx_node_tests gpu_parity_fp32 gpu_parity_fp16
    gpu_parity_bf16_depthwise gpu_parity_fp16_cudnn_depthwise PROPERTIES
    FIXTURES_REQUIRED ref_cases LABELS "gpu" SKIP_RETURN_CODE 77)
  set_tests_properties(test_gpu_engine PROPERTIES FIXTURES_REQUIRED demo_model)
  # --resize-on gpu end to end: the results of --resize-on cpu and of the CPU backend, also when
  # the packed buffer spills images to the CPU resize, and on 2 ranks (2 GPUs where there are)
  add_test(NAME gpu_e2e_resize COMMAND ${SI_E2E_CMD} gpu-resize)
  set_tests_properties(gpu_e2e_resize PROPERTIES FIXTURES_REQUIRED "e2e_set;hostile_set"
    LABELS "gpu;mpi" SKIP_RETURN_CODE 77 TIMEOUT 600)
  if(SI_TORCH_PYTHON)
    # whole models (torch exports): FP32 within 1e-4 of onnxruntime and of the CPU backend
    add_test(NAME gpu_models_fp32
      COMMAND run_onnx_cases --backend cuda --precision fp32 --max-rel 1e-4 --vs-cpu 1e-4
              ${SI_TEST_DATA}/models)
    add_test(NAME gpu_models_fp16
      COMMAND run_onnx_cases --backend cuda --precision fp16 --no-ref --vs-cpu 1e-2
              ${SI_TEST_DATA}/models)
    set_tests_properties(gpu_models_fp32 gpu_models_fp16 PROPERTIES
      FIXTURES_REQUIRED torch_models LABELS "gpu;slow" SKIP_RETURN_CODE 77)
  endif()
endif()

# `shardinfer plan` needs no GPU: the budget of the demo model by component, and the largest
# batch within a limit (the planner the CUDA backend allocates from)
add_test(NAME plan_demo_model
  COMMAND shardinfer plan --model ${SI_DEMO_MODEL} --batch 64 --memory-limit 2)
set_tests_properties(plan_demo_model PROPERTIES FIXTURES_REQUIRED demo_model LABELS "unit"
  PASS_REGULAR_EXPRESSION "total on the GPU[^\n]*\n.*largest batch within 2.0 GiB: [1-9][0-9]*")
