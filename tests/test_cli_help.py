"""The packages' exports load on first use (vqwae.lazy), as they did when imported eagerly."""


def test_a_lazy_package_exports_what_it_did():
    """Names load on first use, the same objects as from their modules; ``__all__`` and ``dir`` list them; an export
    named as its own submodule (``vqwae.quantizers.diagnostics``) stays the export."""
    import vqwae.ot
    import vqwae.quantizers
    from vqwae.quantizers import WassersteinQuantizer, diagnostics
    from vqwae.quantizers.diagnostics import Diagnostics
    from vqwae.quantizers.wasserstein import WassersteinQuantizer as home

    assert WassersteinQuantizer is home
    assert callable(diagnostics) and vqwae.quantizers.diagnostics is diagnostics
    assert set(vqwae.quantizers.__all__) <= set(dir(vqwae.quantizers))
    assert vqwae.quantizers.Diagnostics is Diagnostics
    assert vqwae.quantizers.QUANTIZERS["wasserstein"] is WassersteinQuantizer
    assert list(vqwae.ot.SOLVERS) == ["semidiscrete", "exact", "sinkhorn", "dual"]
    assert vqwae.ot.exact.ExactSolver is vqwae.ot.SOLVERS["exact"]  # a submodule, as an attribute
    try:
        vqwae.quantizers.NoSuchName
    except AttributeError as e:
        assert "vqwae.quantizers" in str(e) and "NoSuchName" in str(e)
    else:
        raise AssertionError("an unknown name was found")
