"""Evaluate retrievers on a dataset with the shared evaluator (the same as the ``glmrag-eval`` console script).

python eval.py                                   # dense vs PPR on the embedded MuSiQue set
python eval.py data=2wiki_test retriever=[ppr] data.limit=100 output_dir=outputs/2wiki
python eval.py data=files data.format=hotpotqa data.questions=hotpot_dev_distractor_v1.json   # your own file
python eval.py study=mine                        # also filed under results/mine/ (read by python -m glmrag.jobs.report)
python eval.py retriever=[dense] qa=true data.limit=20   # also answer with the QA reader (configs/llm/local.yaml):
                                                         # EM/F1, the no-context and subgraph baselines, LLM cost
python eval.py --help                            # the common commands and every config name
"""

from glmrag.jobs.cli import evaluate as main

if __name__ == "__main__":
    main()
