"""The sweep's table and fits as Markdown (RUN/scaling.md, and what `tinylm scaling` prints at the end)."""

from __future__ import annotations

from typing import Any

from tinylm.scaling.parametric_fit import NAMES


def points_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| budget (FLOPs) | depth | N (params) | D (tokens) | D/N | steps | FLOPs spent | dev loss | dev bpb | "
             "wall s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in sorted(rows, key=lambda r: (r["budget"], r["depth"])):
        lines.append(f"| {row['budget']:.3g} | {row['depth']} | {row['params']:,} | {row['tokens']:,} | "
                     f"{row['tokens'] / row['params']:.1f} | {row['steps']} | {row['flops'] / row['budget']:.3f}x | "
                     f"{row['loss']:.4f} | {row['dev_bpb']:.4f} | {row['wall_s']:.0f} |")
    return lines


def fit_lines(result: dict[str, Any]) -> list[str]:
    lines = [f"Approach 3 (Huber on log L, {result['points']} points): L(N, D) = E + A / N^alpha + B / D^beta, "
             f"rms log residual {result['rms_log_residual']:.4f}", "",
             "| parameter | fit | 95% bootstrap interval |", "|---|---|---|"]
    for name in NAMES:
        low, high = result[f"{name}_interval"]
        lines.append(f"| {name} | {result[name]:.4g} | {low:.4g} - {high:.4g} |")
    lines += ["", f"Compute-optimal exponents from the law: N_opt ~ C^{result['law_a']:.3f}, "
                  f"D_opt ~ C^{result['law_b']:.3f}"]
    approach2 = result.get("approach2")
    if approach2:
        lines.append(f"Approach 2 (parabolas per budget): N* ~ C^{approach2['a']:.3f} "
                     f"({approach2['a_interval'][0]:.3f} - {approach2['a_interval'][1]:.3f}), D* ~ "
                     f"C^{approach2['b']:.3f} ({approach2['b_interval'][0]:.3f} - {approach2['b_interval'][1]:.3f})")
    elif result.get("approach2_problem"):
        lines.append(f"Approach 2: {result['approach2_problem']}")
    lines += ["", "| budget (6ND) | N_opt (3) | D_opt / N_opt (3), 95% interval | N* (2) | D*/N* (2) | "
              "N_opt (3) / N* (2) |", "|---|---|---|---|---|---|"]
    for b in result["budgets"]:
        low, high = b["tokens_per_param_interval"]
        two = (f"{b['approach2_params']:,.0f} | {b['approach2_tokens_per_param']:.2f} | {b['params_ratio_3_to_2']:.2f}"
               if b.get("approach2_params") else "- | - | -")
        lines.append(f"| {b['six_nd']:.3g} | {b['params_opt']:,.0f} | {b['tokens_per_param']:.2f} "
                     f"({low:.2f} - {high:.2f}) | {two} |")
    return lines


def prediction_lines(plan: dict[str, Any]) -> list[str]:
    low, high = plan["predicted_interval"]
    lines = [f"Prediction at {plan['budget']:.3g} FLOPs: depth {plan['depth']} ({plan['params']:,} params x "
             f"{plan['tokens']:,} tokens), predicted final dev loss {plan['predicted_loss']:.4f} "
             f"(95% interval {low:.4f} - {high:.4f})"]
    if "measured" in plan:
        lines.append(f"Measured over seeds {', '.join(map(str, plan['seeds']))}: "
                     f"{', '.join(f'{v:.4f}' for v in plan['measured'])}; mean {plan['measured_mean']:.4f}, spread "
                     f"{plan['measured_spread']:.4f}; the prediction is off by {100 * plan['error']:+.2f}%")
    return lines
