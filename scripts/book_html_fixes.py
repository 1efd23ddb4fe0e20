"""Sphinx extension (loaded through _config.yml `sphinx.local_extensions`): fixes to the
HTML that the browser check (tests/browser) found in the stock Jupyter Book 1 stack.

- sphinx-thebe 0.3.1 registers its inline configuration script
  (`const THEBE_JS_URL = ...`) twice under Sphinx 7.4 (once with filename None, once with
  ''), so every page threw "Identifier 'THEBE_JS_URL' has already been declared" in the
  console. Identical scripts are dropped from each page, keeping the first.
"""


def _dedupe_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get('script_files')
    if not scripts:
        return
    seen, kept = set(), []
    for js in scripts:
        key = (str(getattr(js, 'filename', js) or ''),
               tuple(sorted((getattr(js, 'attributes', None) or {}).items())))
        if key not in seen:
            seen.add(key)
            kept.append(js)
    scripts[:] = kept


def setup(app):
    # after the other extensions have added their page scripts
    app.connect('html-page-context', _dedupe_scripts, priority=900)
    return {'parallel_read_safe': True, 'parallel_write_safe': True}
