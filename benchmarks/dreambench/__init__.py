"""DreamBench: a multi-cycle benchmark of memory consolidation fidelity over a scripted year (see README.md)."""
