"""Shared test helpers: waiting, the test sshd, data paths, real-line builders."""
