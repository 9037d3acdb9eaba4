package org.ldpkit.client;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** The repository (-Dldpkit.root, else found upward from the working folder) and docs/protocol.md's vectors. */
final class Docs {
    private Docs() {
    }

    static File root() {
        String given = System.getProperty("ldpkit.root");
        if (given != null) return new File(given);
        for (File dir = new File(System.getProperty("user.dir")).getAbsoluteFile(); dir != null; dir = dir.getParentFile()) {
            if (new File(dir, "docs/protocol.md").isFile()) return dir;
        }
        throw new IllegalStateException("cannot find the repository (docs/protocol.md): pass -Dldpkit.root");
    }

    static String read(String path) {
        try {
            return new String(Files.readAllBytes(new File(root(), path).toPath()), StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    /** docs/protocol.md from "## Test vectors" on. */
    static String section() {
        String doc = read("docs/protocol.md");
        return doc.substring(doc.indexOf("## Test vectors"));
    }

    private static final Pattern FENCE = Pattern.compile("^```([^\\n`]+)\\n([\\s\\S]*?)^```\\s*$", Pattern.MULTILINE);

    /** Every fenced block of the vectors, by its info string ("json sample grr"), body trimmed. */
    static Map<String, String> vectors() {
        Map<String, String> out = new LinkedHashMap<String, String>();
        Matcher m = FENCE.matcher(section());
        while (m.find()) out.put(m.group(1).trim(), m.group(2).trim());
        return out;
    }
}
