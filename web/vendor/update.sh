#!/usr/bin/env bash
# Re-vendor the offline API documentation assets from the npm registry (pinned versions), then
# rewrite SHA256SUMS. Run from anywhere: web/vendor/update.sh. Needs npm; nothing else downloads.
#   swagger-ui-dist  Apache-2.0  (Swagger UI, SmartBear Software)
#   redoc            MIT         (Redoc, Rebilly / Redocly Inc.)
# A version change is a change of the pins here and of the directory names in
# services/gateway/web.py (SWAGGER_UI, REDOC).
set -euo pipefail
SWAGGER_UI_VERSION=5.35.0
REDOC_VERSION=2.5.4
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "swagger-ui-dist@$SWAGGER_UI_VERSION" "redoc@$REDOC_VERSION" >/dev/null)
mkdir -p "$work/swagger" "$work/redoc"
tar xzf "$work/swagger-ui-dist-$SWAGGER_UI_VERSION.tgz" -C "$work/swagger"
tar xzf "$work/redoc-$REDOC_VERSION.tgz" -C "$work/redoc"
swagger=$here/swagger-ui-dist-$SWAGGER_UI_VERSION
redoc=$here/redoc-$REDOC_VERSION
rm -rf "$here"/swagger-ui-dist-* "$here"/redoc-*
mkdir -p "$swagger" "$redoc"
for f in swagger-ui-bundle.js swagger-ui-bundle.js.LICENSE.txt swagger-ui.css favicon-32x32.png \
         LICENSE NOTICE package.json; do
  cp "$work/swagger/package/$f" "$swagger/"
done
for f in bundles/redoc.standalone.js bundles/redoc.standalone.js.LICENSE.txt LICENSE package.json; do
  cp "$work/redoc/package/$f" "$redoc/"
done
# The bundles name source maps that are not vendored: only a browser's developer tools ask.
(cd "$here" && find swagger-ui-dist-* redoc-* -type f | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)
echo "vendored swagger-ui-dist $SWAGGER_UI_VERSION and redoc $REDOC_VERSION into $here"
