"""Evaluation: per-question metrics, bootstrap significance, breakdowns and reports (GLM-RAG §5, §6, App. D, G, H)."""

from glmrag.eval.evaluator import EvalResult, evaluate
from glmrag.eval.outputs import format_markdown, write_outputs

__all__ = ["EvalResult", "evaluate", "format_markdown", "write_outputs"]
