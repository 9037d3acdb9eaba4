package org.ldpkit.client;

import java.util.List;

/**
 * What the reporter uses of the core (definitions, sampling, the wire format), in one
 * place, plus the few helpers the core does not have (period lengths, a join).
 */
final class CoreBridge {
    static final double BUDGET_SLACK = Definitions.BUDGET_SLACK;
    static final int ID_SIZE = Wire.ID_SIZE;
    static final String CONTENT_TYPE = Wire.CONTENT_TYPE;

    private CoreBridge() {}

    /** The mechanism input of a value and whether it was clipped. */
    static final class Encoded {
        final Object input;
        final boolean clipped;

        Encoded(Object input, boolean clipped) {
            this.input = input;
            this.clipped = clipped;
        }
    }

    @SuppressWarnings("unchecked")
    static Definition prepare(Object raw) {
        if (!(raw instanceof java.util.Map)) throw new DefinitionException("a definition must be an object", null, null);
        return Definitions.prepare((java.util.Map<String, Object>) raw);
    }

    static Encoded encode(Definition def, Object value) {
        Definitions.Encoded e = Definitions.encodeValue(def, value);
        return new Encoded(e.input, e.clipped);
    }

    static byte[] sample(Definition def, Object input, Words words) {
        return def.sample(input, words);
    }

    static long deviceCap(Definition def) {
        return Definitions.deviceCap(def);
    }

    static byte[] encodeSealedBatch(byte[] id, List<Wire.Block> blocks) {
        return Wire.encodeSealedBatch(id, blocks);
    }

    static String hex(byte[] bytes) {
        return Wire.toHex(bytes);
    }

    static byte[] unhex(String hex) {
        return Wire.fromHex(hex);
    }

    static boolean knownPeriod(String period) {
        return Definitions.PERIODS.containsKey(period);
    }

    /** The seconds of a period (hour, day, week): {@link Definitions#PERIODS}. */
    static long seconds(String period) {
        Long s = Definitions.PERIODS.get(period);
        if (s == null) throw new IllegalArgumentException("not a period: " + period);
        return s;
    }

    /** {@code String.join(", ", names)} (String.join is API 26 on Android). */
    static String join(Iterable<String> names) {
        StringBuilder b = new StringBuilder();
        for (String n : names) {
            if (b.length() > 0) b.append(", ");
            b.append(n);
        }
        return b.toString();
    }
}
