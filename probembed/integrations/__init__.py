"""Adapters that put probembed behind the interfaces of the frameworks people build RAG with.

One module per framework, each behind its own extra and importing nothing else: `langchain`
(`[langchain]`: an `Embeddings` and a `VectorStore`), `llamaindex` (`[llamaindex]`: a
`BaseEmbedding` and a vector store) and `sentence_transformers` (`Pipeline.as_sentence_transformer`,
the `[models]` extra). They hold no maths: every number comes from `Pipeline` or `Collection`.
"""
