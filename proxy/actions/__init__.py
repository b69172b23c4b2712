"""What the /rag API and the console both do with a request, with the same checks in one place:
uploads, knowledge models, form bodies. Both surfaces import it; it imports neither."""
