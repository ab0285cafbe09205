# Tests of the libtorch worker (workers/, ddp_resnet), included from tests/CMakeLists.txt when
# the ddp_resnet target exists. ctest names start with "workers".

# Parsing, environment and sampler: no libtorch.
add_executable(workers_base_tests
  unit/workers/test_dist_env.cpp
  unit/workers/test_options.cpp
  unit/workers/test_sampler.cpp)
target_link_libraries(workers_base_tests PRIVATE ddprun_test_main ddp_worker_base)
catch_discover_tests(workers_base_tests EXTRA_ARGS --warn NoTests TEST_PREFIX "workers unit: ")

# Models, DDP engine (ranks as threads over a HashStore), data, checkpoints.
add_executable(workers_unit_tests
  unit/workers/test_checkpoint.cpp
  unit/workers/test_data.cpp
  unit/workers/test_ddp_engine.cpp
  unit/workers/test_distributed.cpp
  unit/workers/test_resnet.cpp
  unit/workers/test_sgd_step.cpp)
target_link_libraries(workers_unit_tests PRIVATE ddprun_test_main ddprun_test_support ddp_worker_lib)
target_precompile_headers(workers_unit_tests REUSE_FROM ddp_worker_lib)
catch_discover_tests(workers_unit_tests EXTRA_ARGS --warn NoTests TEST_PREFIX "workers unit: "
  PROPERTIES TIMEOUT 300 ENVIRONMENT OMP_NUM_THREADS=1)

# libtorch's own TCPStore client against the workers' store.
add_executable(workers_store_tests integration/test_torch_store_libtorch.cpp)
target_link_libraries(workers_store_tests PRIVATE ddprun_test_main ddp_worker_lib ddprun_store)
target_precompile_headers(workers_store_tests REUSE_FROM ddp_worker_lib)
catch_discover_tests(workers_store_tests EXTRA_ARGS --warn NoTests TEST_PREFIX "workers: " PROPERTIES TIMEOUT 120)

# ddp_resnet under the real ddprun.
add_executable(workers_tests
  integration/test_ddp_resnet.cpp)
target_link_libraries(workers_tests PRIVATE ddprun_test_main ddprun_test_support)
target_compile_definitions(workers_tests PRIVATE
  DDPRUN_BINARY="$<TARGET_FILE:ddprun>"
  DDP_RESNET_BINARY="$<TARGET_FILE:ddp_resnet>")
if(NOT DDPRUN_WORKERS_WITH_CUDA)
  target_compile_definitions(workers_tests PRIVATE DDP_RESNET_CPU_ONLY)
endif()
add_dependencies(workers_tests ddprun ddp_resnet)
catch_discover_tests(workers_tests EXTRA_ARGS --warn NoTests TEST_PREFIX "workers: " PROPERTIES TIMEOUT 300)

# On a real GPU (ddp_resnet built against a CUDA libtorch): NCCL, Gloo over CUDA tensors,
# --nproc-per-node=gpu, a failure and resume; skipped (77) when no GPU is visible. Never in
# CPU-only CI, where this target does not exist.
if(DDPRUN_WORKERS_WITH_CUDA)
  add_test(NAME "gpu: ddp_resnet on CUDA (NCCL, Gloo over CUDA, restart and resume)"
    COMMAND bash ${PROJECT_SOURCE_DIR}/tests/gpu/gpu_checks.sh $<TARGET_FILE:ddprun>
            $<TARGET_FILE:ddp_resnet>)
  set_tests_properties("gpu: ddp_resnet on CUDA (NCCL, Gloo over CUDA, restart and resume)"
    PROPERTIES TIMEOUT 1800 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
endif()
