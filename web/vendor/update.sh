#!/usr/bin/env bash
# Re-vendor the web client's third-party assets from the npm registry (pinned versions), then
# rewrite SHA256SUMS. Run from anywhere: web/vendor/update.sh. Needs npm; nothing else downloads.
#   swagger-ui-dist  Apache-2.0            (Swagger UI, SmartBear Software)   the API docs
#   redoc            MIT                   (Redoc, Rebilly / Redocly Inc.)     the API docs
#   marked           MIT                   (Christopher Jeffrey, MarkedJS)     forum Markdown
#   dompurify        Apache-2.0 or MPL-2.0 (Cure53)                            its sanitizer
# A version change is a change of the pins here and of the directory names in
# services/gateway/web.py (SWAGGER_UI, REDOC) and web/js/markdown.js (the imports).
set -euo pipefail
SWAGGER_UI_VERSION=5.35.0
REDOC_VERSION=2.5.4
MARKED_VERSION=18.3.0
DOMPURIFY_VERSION=3.5.0
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "swagger-ui-dist@$SWAGGER_UI_VERSION" "redoc@$REDOC_VERSION" \
  "marked@$MARKED_VERSION" "dompurify@$DOMPURIFY_VERSION" >/dev/null)
mkdir -p "$work/swagger" "$work/redoc" "$work/marked" "$work/dompurify"
tar xzf "$work/swagger-ui-dist-$SWAGGER_UI_VERSION.tgz" -C "$work/swagger"
tar xzf "$work/redoc-$REDOC_VERSION.tgz" -C "$work/redoc"
tar xzf "$work/marked-$MARKED_VERSION.tgz" -C "$work/marked"
tar xzf "$work/dompurify-$DOMPURIFY_VERSION.tgz" -C "$work/dompurify"
swagger=$here/swagger-ui-dist-$SWAGGER_UI_VERSION
redoc=$here/redoc-$REDOC_VERSION
marked=$here/marked-$MARKED_VERSION
dompurify=$here/dompurify-$DOMPURIFY_VERSION
rm -rf "$here"/swagger-ui-dist-* "$here"/redoc-* "$here"/marked-* "$here"/dompurify-*
mkdir -p "$swagger" "$redoc" "$marked" "$dompurify"
for f in swagger-ui-bundle.js swagger-ui-bundle.js.LICENSE.txt swagger-ui.css favicon-32x32.png \
         LICENSE NOTICE package.json; do
  cp "$work/swagger/package/$f" "$swagger/"
done
for f in bundles/redoc.standalone.js bundles/redoc.standalone.js.LICENSE.txt LICENSE package.json; do
  cp "$work/redoc/package/$f" "$redoc/"
done
for f in lib/marked.esm.js LICENSE package.json; do
  cp "$work/marked/package/$f" "$marked/"
done
for f in dist/purify.es.mjs LICENSE package.json; do
  cp "$work/dompurify/package/$f" "$dompurify/"
done
# The bundles name source maps that are not vendored: only a browser's developer tools ask.
(cd "$here" && find swagger-ui-dist-* redoc-* marked-* dompurify-* -type f | LC_ALL=C sort \
  | xargs sha256sum >SHA256SUMS)
echo "vendored swagger-ui-dist $SWAGGER_UI_VERSION, redoc $REDOC_VERSION, marked $MARKED_VERSION" \
  "and dompurify $DOMPURIFY_VERSION into $here"
