"""Fleet telemetry: state, history, the monitor that feeds it, record and replay."""
