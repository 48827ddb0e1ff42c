"""OS and DeepSpeed workarounds the entry point needs: shared memory, /proc scans, host memory,
C++ extension builds and the start-up watchdog."""
