# Sourced (POSIX sh): the GPU test programs, the one list pack.sh builds and packs and
# run_tests.sh runs (in this order, each one that was packed).
GPU_TESTS="test_cuda_ops test_cuda_golden test_cuda_sample test_cuda_kvmem test_cuda_sched_params test_cuda_sched_fork"
GPU_TESTS="$GPU_TESTS test_cuda_sched_constraint test_cuda_sched_spec test_cuda_qwen35_mtp test_comm_nccl_gpu test_comm_local_gpu test_cuda_tp"
