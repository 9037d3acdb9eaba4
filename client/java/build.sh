#!/usr/bin/env bash
# Builds and tests the Java client with plain javac (no Maven, no Gradle, no download):
# the library at Java 8 language level (javac --release 8), its JUnit 5 tests against
# Debian's junit5 (apt-get install openjdk-17-jdk-headless junit5). Exits non-zero on any
# failure. Output: build/ldpkit-client.jar.
#   bash client/java/build.sh          build and run every test
#   bash client/java/build.sh --no-test  only build the jar
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
junit="${JUNIT_JAR:-/usr/share/java/junit-platform-console-standalone.jar}"
build="$here/build"
rm -rf "$build"
mkdir -p "$build/classes" "$build/test-classes"
find "$here/src/main/java" -name '*.java' > "$build/main-sources"
javac --release 8 -Xlint:all -Xlint:-options -Werror -encoding UTF-8 -d "$build/classes" @"$build/main-sources"
jar cf "$build/ldpkit-client.jar" -C "$build/classes" .
echo "built $build/ldpkit-client.jar"
if [ "${1:-}" = "--no-test" ]; then exit 0; fi
if [ ! -f "$junit" ]; then
    echo "no JUnit console at $junit: apt-get install junit5 (or set JUNIT_JAR)" >&2
    exit 2
fi
find "$here/src/test/java" -name '*.java' > "$build/test-sources"
javac -encoding UTF-8 -d "$build/test-classes" -cp "$build/classes:$junit" @"$build/test-sources"
status=0
java -Dldpkit.root="$root" ${JAVA_TEST_OPTS:-} -jar "$junit" \
    --class-path "$build/classes:$build/test-classes" --scan-class-path \
    --disable-banner --disable-ansi-colors --details=summary --fail-if-no-tests ${JUNIT_ARGS:-} \
    | tee "$build/junit.txt" || status=$?
# The plain closing line a CI log reader counts ("java: N passed, N failed").
passed=$(sed -n 's/^\[ *\([0-9]*\) tests successful *\]$/\1/p' "$build/junit.txt")
failed=$(sed -n 's/^\[ *\([0-9]*\) tests failed *\]$/\1/p' "$build/junit.txt")
echo "java: ${passed:-0} passed, ${failed:-0} failed"
exit "$status"
