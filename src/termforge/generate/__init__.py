"""The generate stage: task signatures into task directories, procedurally (families/) or by an
LLM chain (llm.py), written through one writer.
"""
