"""glmrag: graph-based retrieval for multi-hop RAG."""
