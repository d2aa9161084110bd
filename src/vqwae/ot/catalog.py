"""What the options of ``vqwae.ot`` need to know, declared without torch (a training config and the command line's
help read it): the solvers by name, the dual form's eps as the authors set it, and the semidiscrete solver's memory
bound."""

#: The solvers of the WS term: each name is the module of ``vqwae.ot`` that holds the class named here
#: (``vqwae.ot.SOLVERS`` maps each name to the class itself).
SOLVER_CLASSES = {"semidiscrete": "SemiDiscreteSolver", "exact": "ExactSolver", "sinkhorn": "SinkhornSolver",
                  "dual": "DualSolver"}

# Largest number of (latent, code) entries materialised at once (64 MiB of float32), whatever K and N.
CHUNK_ENTRIES = 1 << 24


def authors_dual_epsilon(dataset: str | None) -> float:
    """The dual form's absolute eps as the authors run it: 0.1 on MNIST, 0.01 otherwise (their CIFAR-10 value)."""
    return 0.1 if dataset == "mnist" else 0.01
