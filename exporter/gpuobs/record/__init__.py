"""Stage 1, recording: build the host tool and device patches, and run a program under them
(`gpuobs record`, or `gpuobs.attach()` in-process). The patches write records into a device
buffer that the tool flushes into a .gpuobs file."""
