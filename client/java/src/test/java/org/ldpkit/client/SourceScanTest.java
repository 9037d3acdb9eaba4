package org.ldpkit.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.DataInputStream;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.junit.jupiter.api.Test;

/**
 * The library uses only what Android has (issue 31): imports from java.lang, java.io,
 * java.nio (file, charset), java.util, java.util.concurrent, java.net (HttpURLConnection,
 * URL, and its exceptions), java.security, javax.crypto; no reflection; Java 8 class files.
 */
class SourceScanTest {
    /** What a name used in the library may be (a class of these packages; no subpackage but those listed). */
    static final List<Pattern> ALLOWED = Arrays.asList(
            Pattern.compile("java\\.lang\\.[A-Z]\\w*(\\.\\w+)*"),
            Pattern.compile("java\\.io\\.[A-Z]\\w*(\\.\\w+)*"),
            Pattern.compile("java\\.nio\\.(file|charset)\\.[A-Z]\\w*(\\.\\w+)*"),
            Pattern.compile("java\\.util\\.[A-Z]\\w*(\\.\\w+)*"),
            Pattern.compile("java\\.util\\.concurrent(\\.atomic|\\.locks)?\\.[A-Z]\\w*(\\.\\w+)*"),
            Pattern.compile("java\\.net\\.(HttpURLConnection|URL|URLConnection|\\w+Exception)(\\.\\w+)*"),
            Pattern.compile("java\\.security\\.[A-Z]\\w*(\\.\\w+)*"),
            Pattern.compile("javax\\.crypto(\\.spec)?\\.[A-Z]\\w*(\\.\\w+)*"),
            Pattern.compile("org\\.ldpkit\\.client\\.[A-Z]\\w*(\\.\\w+)*"));
    /** Reflection and the like, whatever the import. */
    static final List<String> FORBIDDEN = Arrays.asList(
            "Class.forName", "getDeclaredMethod", "getDeclaredField", "getMethod(", "setAccessible", "java.lang.reflect",
            "java.lang.invoke", "sun.misc", "java.net.http");
    private static final Pattern IMPORT = Pattern.compile("^\\s*import\\s+(static\\s+)?([\\w.]+?)(\\.\\*)?\\s*;", Pattern.MULTILINE);
    private static final Pattern QUALIFIED = Pattern.compile("\\b((?:java|javax|android|sun|com|org|kotlin)\\.[a-z]\\w*(?:\\.\\w+)*)");

    static File mainSources() {
        return new File(Docs.root(), "client/java/src/main/java");
    }

    static List<File> javaFiles(File dir) {
        List<File> out = new ArrayList<File>();
        File[] children = dir.listFiles();
        if (children == null) return out;
        Arrays.sort(children);
        for (File f : children) {
            if (f.isDirectory()) out.addAll(javaFiles(f));
            else if (f.getName().endsWith(".java")) out.add(f);
        }
        return out;
    }

    /** The code of a file without comments, string and char literals (so a doc comment may name anything). */
    static String code(String source) {
        StringBuilder out = new StringBuilder(source.length());
        int i = 0;
        int n = source.length();
        while (i < n) {
            char c = source.charAt(i);
            if (c == '/' && i + 1 < n && source.charAt(i + 1) == '*') {
                int end = source.indexOf("*/", i + 2);
                i = end < 0 ? n : end + 2;
                out.append(' ');
            } else if (c == '/' && i + 1 < n && source.charAt(i + 1) == '/') {
                while (i < n && source.charAt(i) != '\n') i++;
            } else if (c == '"' || c == '\'') {
                i++;
                while (i < n && source.charAt(i) != c) i += source.charAt(i) == '\\' ? 2 : 1;
                i++;
                out.append(c).append(c);
            } else {
                out.append(c);
                i++;
            }
        }
        return out.toString();
    }

    static boolean allowed(String name) {
        for (Pattern p : ALLOWED) if (p.matcher(name).matches()) return true;
        return false;
    }

    /** Every problem of one file's source: "File.java: import java.math.BigInteger". */
    static List<String> problems(String fileName, String source) {
        List<String> out = new ArrayList<String>();
        String code = code(source);
        Matcher m = IMPORT.matcher(code);
        while (m.find()) {
            String name = m.group(2) + (m.group(3) != null ? ".X" : "");
            if (m.group(3) != null && !name.matches(".*\\.[A-Z]\\w*\\.X")) name = m.group(2) + ".Wildcard";
            if (!allowed(name)) out.add(fileName + ": import " + m.group(2) + (m.group(3) != null ? ".*" : ""));
        }
        Matcher q = QUALIFIED.matcher(code.replaceAll("(?m)^\\s*(import|package)\\s[^;]*;", ""));
        while (q.find()) {
            String name = q.group(1);
            if (!allowed(name)) out.add(fileName + ": uses " + name);
        }
        for (String bad : FORBIDDEN) if (code.contains(bad)) out.add(fileName + ": uses " + bad);
        return out;
    }

    @Test
    void theLibraryImportsOnlyWhatAndroidHas() throws IOException {
        List<File> files = javaFiles(mainSources());
        assertTrue(files.size() >= 10, "the scan sees the library's sources");
        List<String> problems = new ArrayList<String>();
        for (File f : files) {
            problems.addAll(problems(f.getName(), new String(Files.readAllBytes(f.toPath()), StandardCharsets.UTF_8)));
        }
        assertEquals(new ArrayList<String>(), problems, "imports outside java.lang, java.io, java.nio.{file,charset}, "
                + "java.util, java.util.concurrent, java.net.{HttpURLConnection,URL}, java.security, javax.crypto");
    }

    @Test
    void theScanCatchesWhatIsNotAllowed() {
        assertEquals(Arrays.asList("X.java: import java.math.BigInteger"), problems("X.java", "package a;\nimport java.math.BigInteger;\nclass X {}"));
        assertEquals(Arrays.asList("X.java: import java.net.http.HttpClient", "X.java: uses java.net.http"), problems("X.java", "import java.net.http.HttpClient;"));
        assertEquals(Arrays.asList("X.java: import java.util.regex.*"), problems("X.java", "import java.util.regex.*;"));
        assertEquals(Arrays.asList("X.java: import java.lang.reflect.Method", "X.java: uses java.lang.reflect"),
                problems("X.java", "import java.lang.reflect.Method;"));
        assertEquals(Arrays.asList("X.java: uses java.math.BigInteger"), problems("X.java", "class X { java.math.BigInteger b; }"));
        assertEquals(Arrays.asList("X.java: uses Class.forName"), problems("X.java", "class X { Object o = Class.forName(\"a\"); }"));
        assertEquals(Arrays.asList("X.java: import android.util.Log"), problems("X.java", "import android.util.Log;"));
        assertEquals(new ArrayList<String>(), problems("X.java",
                "import java.util.List;\nimport java.util.concurrent.TimeUnit;\nimport java.net.HttpURLConnection;\n"
                        + "import javax.crypto.spec.SecretKeySpec;\nimport static java.lang.Math.max;\n/** java.math.BigInteger in a comment */\n"
                        + "class X { String s = \"java.math.BigInteger\"; }"));
    }

    @Test
    void theClassFilesAreJava8() throws IOException {
        // javac --release 8: major version 52, which Android's D8 and any JVM 8+ load.
        for (String name : new String[] {"Sampling", "Definitions", "Json", "Wire", "Canonical", "ChaChaWords"}) {
            InputStream in = Sampling.class.getResourceAsStream(name + ".class");
            assertFalse(in == null, name);
            DataInputStream data = new DataInputStream(in);
            try {
                assertEquals(0xCAFEBABE, data.readInt());
                data.readUnsignedShort();
                assertEquals(52, data.readUnsignedShort(), name + ".class is not a Java 8 class file");
            } finally {
                data.close();
            }
        }
    }
}
