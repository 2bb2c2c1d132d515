"""GPU telemetry: the host agent's stream, the nvidia-smi fallback, and their shared schema."""
