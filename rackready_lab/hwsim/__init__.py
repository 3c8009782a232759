"""hwsim: the simulated GPU-server hardware of the lab's nodes (see README.md)."""
