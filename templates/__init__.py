"""The console's Jinja2 templates and static files, installed as the package ``admin.templates``.

A regular package (not a namespace one) so that ``importlib.resources.files()`` gives a real
directory, which Jinja2's FileSystemLoader and Starlette's StaticFiles need."""
