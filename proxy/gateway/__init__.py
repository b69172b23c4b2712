"""The Ollama and OpenAI surfaces: routes, the chat pipeline, grounding, relaying replies."""
