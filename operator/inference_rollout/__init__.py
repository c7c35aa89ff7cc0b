"""InferenceRollout: gray releases of LLM inference servers on Kubernetes."""

__version__ = "0.1.0"
