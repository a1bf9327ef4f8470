"""Scaling laws on the machine at hand: one depth dial (depth.py), IsoFLOP sweeps (sweep.py), the two fits of
Hoffmann et al. (isoflop_fit.py: Approach 2; parametric_fit.py: Approach 3), and a prediction checked by a run."""
