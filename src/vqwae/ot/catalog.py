"""What the options of ``vqwae.ot`` need to know, declared without torch (a training config and the command line's
help read it): the solvers by name, and the semidiscrete solver's memory bound."""

#: The solvers of the WS term: each name is the module of ``vqwae.ot`` that holds the class named here
#: (``vqwae.ot.SOLVERS`` maps each name to the class itself).
SOLVER_CLASSES = {"semidiscrete": "SemiDiscreteSolver", "exact": "ExactSolver", "sinkhorn": "SinkhornSolver",
                  "dual": "DualSolver"}

# Largest number of (latent, code) entries materialised at once (64 MiB of float32), whatever K and N.
CHUNK_ENTRIES = 1 << 24
