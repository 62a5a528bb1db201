# The GPU suite's three parts, each well inside one ten-minute call on its own; sourced by
# device_session.sh (one part a call) and device_suite.sh (all three in one call).
GPU_PART1="tests/test_gpu_jax.py tests/test_gpu_programs.py tests/test_bounds_gpu_wait.py"
GPU_PART2="tests/test_gpu_sampling.py tests/test_gpu_server.py tests/test_gpu_block_starts.py \
tests/test_gpu_conditional.py tests/test_patch_stack_saves.py"
GPU_PART3="tests/test_gpu_tool.py"
