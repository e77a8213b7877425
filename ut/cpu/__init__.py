"""XLA-CPU kernels and host settings, chosen by a static switch (never by ut.core)."""
